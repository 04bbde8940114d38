"""`python -m tracekit`: the command line (guarded: spawned batch workers import the main module)."""

from tracekit.cli.main import run

if __name__ == "__main__":
    run()
