"""Engines: the release kernel's plan functions on Polars (:mod:`opendp_wgm.engines.polars`), and the same
kernel steps on Spark (:mod:`opendp_wgm.engines.spark`) and behind Tumult Core (:mod:`opendp_wgm.engines.tumult`)."""
