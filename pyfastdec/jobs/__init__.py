"""What `fastdec translate` and `correct` run, apart from parsing their command line: the
job's options and model directories, its input and output lines, progress, worker
processes and its errors and exit codes. The CLI (pyfastdec.cli) and the Ray paths
(pyfastdec.ray, ray_cli, resumable_job, row_batches) import these modules; nothing here
imports the CLI.

errors      PROG, exit codes, CliError (one line on stderr), warn
interrupts  Terminated (SIGTERM raised as Ctrl-C is), sigint_deferred
options     ModelSpec (the model directories, picklable), DecodeOptions
lines       numbered input lines (InputLines), whole-line output (LineWriter)
progress    the progress bar and --stats
decode      a block of lines decoded (decode_rows, translate_block)
workers     the blocks decoded in this process or in worker processes

Kept light: importing the package imports none of these (errors is imported before the
CLI's heavy modules, while Ctrl-C is still held back)."""
