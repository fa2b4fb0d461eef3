"""``ragwb bench``: the speed benchmark with its targets (``suite``) and the ANN scale curve (``scale``)."""
