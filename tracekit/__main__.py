from tracekit.cli.main import run

run()
