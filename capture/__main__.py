"""`python -m capture ...`: the capture command without the rest of tracekit's CLI."""

from capture.cli import capture_command

if __name__ == "__main__":
    capture_command(prog_name="python -m capture")
