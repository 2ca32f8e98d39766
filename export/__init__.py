"""Edge export: a project model directory -> a verified, self-contained LiteRT bundle.

    python -m export --model runs/ft/sst2 --quantize dynamic --output bundles/sst2
    python -m export.report --model runs/ft/sst2 --data ../shared/data/glue/SST-2/dev.tsv

Modules: `convert` (Keras -> .tflite, the quantization variants), `examples`
(the real inputs an export is calibrated and verified on), `verify` (the new
file against the Keras model), `bundle` (the bundle directory, written
atomically), `interpreter` (`TFLiteModel`, the LiteRT `predict` the tasks
score with), `report` (every variant's size, dev metric and latency), `runtime` (a
bundle's task methods, LiteRT alone; `written_words` writes its predicted pieces back into the
text, `runtime_command` is `python -m export.runtime`) and `keras_runtime` (the same methods on
a model directory).

`import export` is cheap: nothing heavy is imported here.
"""
