"""The product's pure vocabulary, used by every stage: offset windows, output formats, the typed manifest, the
errors a user sees, and the one strict pydantic base. No I/O, no Spark, no Dagster.

    windows.py   OffsetWindow (a Dagster partition key), contiguity, where the next window starts
    formats.py   the archived envelope and each output format's writer settings (FORMATS)
    manifest.py  Manifest: the commit record of one window, versioned, read back by every consumer
    errors.py    every error class whose message a user acts on
    base.py      StrictModel: the one strict base of every config model

Import names from the module that defines them; this file re-exports nothing, so importing one stage never pulls
in another stage's dependencies.
"""
