"""One local Spark session per test process, shared by test_spark.py and test_tumult.py.

Starting a SparkContext costs seconds; the engine tests only read the session (no test changes its
configuration or stops it), so one session serves both modules. It skips, with the reason, when pyspark,
pyarrow, pandas or Java is missing.
"""

from __future__ import annotations

import os
import shutil
import sys

import opendp.prelude as dp
import pytest


@pytest.fixture(scope="session")
def spark_session(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("pyspark", reason='pyspark is not installed: pip install "opendp-wgm[spark]"')
    pytest.importorskip("pyarrow", reason='pyarrow is not installed: pip install "opendp-wgm[spark]"')
    pytest.importorskip("pandas", reason='pandas is not installed: pip install "opendp-wgm[spark]"')
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (17): none on PATH and JAVA_HOME is unset")
    from pyspark.sql import SparkSession

    # executors must run this interpreter (and so see this environment's opendp_wgm)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    session = (
        SparkSession.builder.master("local[2]")
        .appName("opendp-wgm-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        # Tumult materialises releases as tables: keep its warehouse out of the working tree
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


@pytest.fixture(scope="module")
def spark(spark_session):  # type: ignore[no-untyped-def]
    """The process's Spark session, under the name the engine tests use."""
    return spark_session
