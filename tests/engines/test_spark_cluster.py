"""The Spark engine on a local cluster: executors in their own JVMs, with their own Python workers.

``local[2]`` (tests/engines/conftest.py) runs the tasks in the driver's JVM; here ``local-cluster[2,1,1024]``
starts two workers, each launching an executor JVM that forks its own Python workers, so what a real cluster does
is exercised: the noise step (``mapInArrow``) is pickled to the executors and imports the package there, each
executor draws from its own OS entropy, and each hashes its partitions of the bound step. The releases are checked
against the Polars engine: bit for bit without noise (the same function of the data), and through the constructors
calibrated from a budget (the same maps).

A Spark application holds one SparkContext per process: this module runs in its own pytest process
(``.ci/engines.sh``), and skips when another test module's session is active in this one.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import opendp_wgm as wgm
from opendp_wgm.spark import spark_user_items_space

pytestmark = pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("pyspark", reason='pyspark is not installed: pip install "opendp-wgm[spark]"')
    pytest.importorskip("pyarrow", reason='pyarrow is not installed: pip install "opendp-wgm[spark]"')
    pytest.importorskip("pandas", reason='pandas is not installed: pip install "opendp-wgm[spark]"')
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (17): none on PATH and JAVA_HOME is unset")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # one SparkContext per process
        pytest.skip("another Spark session is active in this process: run this module on its own (.ci/engines.sh)")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python workers run this interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")  # 2 workers, 1 core and 1 GiB each
        .appName("opendp-wgm-cluster-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "512m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # the executors' Python workers import this checkout's opendp_wgm (the noise step runs there)
        .config("spark.executorEnv.PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    deadline = time.monotonic() + 300  # the executor JVMs start in the background: wait until both registered
    while _executors(session) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    yield session
    session.stop()


def _executors(session) -> int:  # type: ignore[no-untyped-def]
    """The executors registered with the driver (its memory status lists the driver's block manager too)."""
    return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


def frame_of(rows: list[tuple[int, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String}, orient="row")


def to_spark(cluster, frame: pl.DataFrame):  # type: ignore[no-untyped-def]
    return cluster.createDataFrame(frame.rows(), "user long, item string").repartition(4)


def popular_and_rare() -> pl.DataFrame:
    """Two items held by 300 users each (one item per user), and 20 items held by one user each."""
    rows = [(u, "p" if u < 300 else "q") for u in range(600)]
    rows += [(1000 + i, f"rare{i}") for i in range(20)]
    return frame_of(rows)


def sips_frame() -> pl.DataFrame:
    """Round 1 at T = 5 releases p1..p4 (26 users each); round 2 at T = 5 releases r (6 users, whose weight was
    spread over four items in round 1); round 3 at T = 2.5 releases q (3 loners). No user holds more than 4."""
    rows = [(u, f"p{j}") for u in range(26) for j in range(1, 5)]
    rows += [(100 + u, item) for u in range(6) for item in ("p1", "p2", "p3", "r")]
    rows += [(200 + u, "q") for u in range(3)]
    return frame_of(rows)


def test_the_executors_are_their_own_processes(cluster) -> None:
    assert _executors(cluster) == 2
    pids = cluster.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).distinct().collect()
    assert os.getpid() not in pids


def test_dp_sips_without_noise_is_the_polars_release(cluster) -> None:
    """Every round's histogram is the Polars one where no user holds more than Δ0 items: with (almost) no
    noise, the releases agree item for item and round for round, whatever each executor's hashing."""
    frame = sips_frame()
    params = dict(max_contributions=4, scales=[1e-7] * 3, thresholds=[5.0, 5.0, 2.5])
    released = wgm.make_dp_sips(*spark_user_items_space(), **params)(to_spark(cluster, frame))
    expected = wgm.make_dp_sips(*wgm.user_items_space(), **params)(frame)
    assert released.schema == expected.schema
    assert released.select("item", "round").rows() == expected.select("item", "round").rows()
    assert released.select("item", "round").rows() == [("p1", 1), ("p2", 1), ("p3", 1), ("p4", 1), ("q", 3), ("r", 2)]


def test_wgm_from_budget_releases_with_the_polars_map(cluster) -> None:
    """The calibrated WGM (σ ≈ 3.9, T ≈ 18.2): the popular items (weight 300) are released, and at most one rare
    item (weight 1: 4.4σ below T, so each passes with probability ≈ 5e-6; two of 20 ≈ 5e-9); the map is the
    Polars measurement's, exactly."""
    budget = dict(max_contributions=1, epsilon=1.0, delta=1e-5)
    m = wgm.make_wgm_from_budget(*spark_user_items_space(), **budget)
    reference = wgm.make_wgm_from_budget(*wgm.user_items_space(), **budget)
    assert [m.map(d) for d in range(4)] == [reference.map(d) for d in range(4)]
    assert m.check(1, (1.0, 1e-5))
    released = m(to_spark(cluster, popular_and_rare()))
    assert released.schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64})
    assert {"p", "q"} <= set(released["item"]) and released.height <= 3


def test_adaptive_dp_sips_from_budget_releases_with_the_polars_map(cluster) -> None:
    """The default DP-SIPS (the adaptive schedule): the two-bin count runs on the executors, the branch on the
    driver; the release has the Polars columns and the map is the Polars measurement's, exactly. The popular items
    are released in round 1 (1.3σ above its T) or else in round 2 or 3 (over 60σ above theirs); a rare item is
    at least 4.4σ below every later round's T."""
    budget = dict(max_contributions=1, epsilon=1.0, delta=1e-5)
    m = wgm.make_dp_sips_from_budget(*spark_user_items_space(), **budget)
    reference = wgm.make_dp_sips_from_budget(*wgm.user_items_space(), **budget)
    assert [m.map(d) for d in range(4)] == [reference.map(d) for d in range(4)]
    assert m.check(1, (1.0, 1e-5))
    released = m(to_spark(cluster, popular_and_rare()))
    assert released.schema == pl.Schema({"item": pl.String, "noisy_weight": pl.Float64, "round": pl.Int16})
    assert {"p", "q"} <= set(released["item"]) and released.height <= 3
    assert set(released["round"].to_list()) <= {1, 2, 3}


def test_two_stage_over_adaptive_dp_sips_ranks_the_popular_items_with_the_polars_maps(cluster) -> None:
    """Top-k and the hitting set from a budget with DP-SIPS (adaptive) as stage 1: stage 2's candidate counts
    (top-k) and (user, candidate) pairs (hitting set) are computed by the executors through a broadcast join,
    the selection runs on the driver. p and q (300 users each) are released by some round (over 13σ above the
    last round's T) and outrank any rare candidate by 299 users (at scale 4 each peeling draw picks a rare one with
    probability below 20·e^-74); the maps are the Polars measurements'."""
    budget = dict(k=2, max_contributions=1, epsilon=1.0, delta=1e-5, stage_1="dp-sips")
    sdf = to_spark(cluster, popular_and_rare())
    for make in (wgm.make_wgm_top_k_from_budget, wgm.make_wgm_hitting_set_from_budget):
        m = make(*spark_user_items_space(), **budget)
        reference = make(*wgm.user_items_space(), **budget)
        assert [m.map(d) for d in range(3)] == [reference.map(d) for d in range(3)]
        released = m(sdf)
        assert released.schema == pl.Schema({"item": pl.String, "rank": pl.UInt32})
        assert set(released["item"]) == {"p", "q"} and released["rank"].to_list() == [1, 2]


def test_partition_selection_and_auto_choice_run_on_the_executors(cluster) -> None:
    """Partition selection's per-item draws (its release table pickled with the step) and the choice's bins
    (``max_contributions="auto"``) run on the cluster with the Polars maps. At (1, 1e-5), n* = 23: p and q (300
    users each) are certain; each rare item (one user) passes with probability δ = 1e-5 (two of 20: ≈ 2e-8). The
    users hold one item each: the bins are all in bin 0, and the choice at a huge budget is Δ0 = 1, whose
    candidate is the same partition selection."""
    sdf = to_spark(cluster, popular_and_rare())
    m = wgm.make_partition_selection(*spark_user_items_space(), epsilon=1.0, delta=1e-5)
    reference = wgm.make_partition_selection(*wgm.user_items_space(), epsilon=1.0, delta=1e-5)
    assert [m.map(d) for d in range(4)] == [reference.map(d) for d in range(4)]
    released = m(sdf)
    assert released.schema == pl.Schema({"item": pl.String})
    assert {"p", "q"} <= set(released["item"]) and released.height <= 3
    auto = dict(max_contributions="auto", epsilon=500.0, delta=1e-5, auto_fraction=0.5)
    chosen = wgm.make_wgm_from_budget(*spark_user_items_space(), **auto)(sdf)
    assert chosen.max_contributions == 1
    assert chosen.columns == ["item", "noisy_weight"] and {"p", "q"} <= set(chosen["item"])


def test_keys_with_statistics_release_as_on_polars(cluster) -> None:
    """``make_wgm_group_by`` on the cluster: the key release, then each released key's count and clamped sum
    (per-user bounded aggregates computed by the executors). Nothing is truncated (at most 3 keys per user and 3
    rows per key) and the noise is below half a lattice step, so the release equals the Polars release, column for
    column; the calibrated form's map is the Polars one, exactly."""
    rows = [(u, "a", u % 101) for u in range(40)]
    rows += [(u, "b", (7 * u) % 150) for u in range(0, 40, 2)] + [(u, "b", 3) for u in range(0, 40, 4)]
    rows += [(u, "c", 5) for u in range(0, 40, 3)]
    frame = pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String, "minutes": pl.Int64}, orient="row")
    sdf = cluster.createDataFrame(frame.rows(), "user long, item string, minutes long").repartition(4)
    options = dict(max_contributions=3, max_rows_per_key=3, scale=1e-6, sums={"minutes": (0, 100)})
    key_release = wgm.then_wgm(max_contributions=3, scale=1e-7, threshold=0.5)
    released = wgm.make_wgm_group_by(*spark_user_items_space(), key_release=key_release, **options)(sdf)
    expected = wgm.make_wgm_group_by(*wgm.user_items_space(), key_release=key_release, **options)(frame)
    assert released.columns == ["item", "noisy_weight", "count", "minutes_sum"]
    assert released.sort("item").equals(expected.sort("item")), (released, expected)
    assert released.sort("item")["count"].to_list() == [40, 30, 14]
    budget = dict(max_contributions=3, epsilon=1.0, delta=1e-6, sums={"minutes": (0, 100)})
    m = wgm.make_wgm_group_by_from_budget(*spark_user_items_space(), **budget)
    reference = wgm.make_wgm_group_by_from_budget(*wgm.user_items_space(), **budget)
    assert [m.map(d) for d in range(1, 4)] == [reference.map(d) for d in range(1, 4)]
    assert set(m(sdf)["item"]) <= {"a", "b", "c"}
