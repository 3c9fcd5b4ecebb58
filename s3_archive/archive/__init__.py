"""Archiving a window, in the order it happens:

    plan.py     which windows to cut from Kafka's offsets (pure; used by the sensor) and what retention took
    window.py   one window end to end: check Kafka still has it, write it, commit it
    write.py    Spark reads exactly the window from Kafka and writes it to staging in the configured format
    buckets.py  a record's layout bucket as a Spark column (keys/buckets.py is its Python reference)
    commit.py   staging → deterministic final keys → manifest with If-None-Match (the commit point)
"""
