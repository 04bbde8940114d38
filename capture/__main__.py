"""`python -m tracekit.capture ...`: the capture command without the rest of tracekit's CLI."""

from .cli import capture_command

if __name__ == "__main__":
    capture_command(prog_name="python -m tracekit.capture")
