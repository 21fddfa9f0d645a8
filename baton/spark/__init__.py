"""baton's data pipeline on Apache Spark (PySpark): the ``baton`` streaming source, the apply
step, and the session settings."""
