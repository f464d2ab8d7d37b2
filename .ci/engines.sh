#!/usr/bin/env bash
# Engine tests: the Spark engine and the Tumult Core adapter, in the environments they are supported in.
#
#   bash .ci/engines.sh            # from the repository root or anywhere; called by .ci/run
#
# Two supported combinations (docs/engines.md, "Installing"):
#   1. "engines": opendp-wgm[spark,tumult] in its own venv. Tumult Core 0.20 on Python 3.11 needs numpy < 2
#      and pandas < 2, so this venv resolves to numpy 1.26, pandas 1.5, pyarrow 23, pyspark 3.5.
#      Runs tests/engines/ (test_spark.py, test_spark_group_by.py, test_spark_auto.py, test_tumult.py, test_streaming.py; then
#      test_spark_cluster.py in its own process: a local-cluster Spark, executors in their own JVMs and Python
#      workers) and
#      tutorials/04_engines.ipynb.
#   2. "spark-numpy2": the main environment (numpy 2, run `pip install -e .` first) plus pyspark 3.5 and
#      pandas 2, in a venv that sees the main site-packages. Runs tests/engines/test_spark.py,
#      tests/engines/test_spark_group_by.py and tests/engines/test_spark_auto.py.
#
# Environment: ENGINES_VENV (default /tmp/venv-engines), SPARK_VENV (default /tmp/venv-spark-numpy2),
# ENGINES_SKIP_NUMPY2=1 to run combination 1 only. Needs Java 17 (`java` on PATH or JAVA_HOME).
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINES_VENV="${ENGINES_VENV:-/tmp/venv-engines}"
SPARK_VENV="${SPARK_VENV:-/tmp/venv-spark-numpy2}"
PYTHON="${PYTHON:-python}"
export SPARK_LOCAL_IP=127.0.0.1  # Spark binds to loopback only
export PYTHONDONTWRITEBYTECODE=1

if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    echo "engines.sh: Spark needs Java 17 (apt-get install openjdk-17-jre-headless)" >&2
    exit 1
fi
java -version 2>&1 | head -n 1

seconds() { date +%s; }

# ---------------------------------------------------------------------------------------------------------
# 1. opendp-wgm[spark,tumult] in its own venv
t0=$(seconds)
[ -x "$ENGINES_VENV/bin/python" ] || "$PYTHON" -m venv "$ENGINES_VENV"
"$ENGINES_VENV/bin/python" -m pip install --quiet -e ".[spark,tumult]" pytest nbclient nbformat ipykernel
t1=$(seconds)
echo "engines venv: installed in $((t1 - t0)) s"
"$ENGINES_VENV/bin/python" - <<'EOF'
from importlib.metadata import version
import pyspark, tmlt.core  # noqa: F401  (fail here, loudly, if an extra did not install)
names = ("numpy", "pandas", "pyarrow", "polars", "opendp", "pyspark", "tmlt.core", "scipy", "randomgen")
print("engines venv:", ", ".join(f"{n} {version(n)}" for n in names))
EOF
# the engine tests must run here, not skip: -rs lists skips and the grep fails the job on any
"$ENGINES_VENV/bin/python" -m pytest tests/engines/test_spark.py tests/engines/test_spark_group_by.py \
    tests/engines/test_spark_auto.py tests/engines/test_tumult.py tests/engines/test_streaming.py \
    -p no:cacheprovider -q -rs 2>&1 | tee /tmp/engines-pytest.log
if grep -q "^SKIPPED" /tmp/engines-pytest.log; then
    echo "engines.sh: engine tests were skipped in the engines venv" >&2
    exit 1
fi
# Spark in local-cluster mode (one SparkContext per process: its own pytest run; 1.6 min at load 9.5 on 2 cores)
"$ENGINES_VENV/bin/python" -m pytest tests/engines/test_spark_cluster.py -p no:cacheprovider -q -rs 2>&1 \
    | tee /tmp/engines-cluster-pytest.log
if grep -q "^SKIPPED" /tmp/engines-cluster-pytest.log; then
    echo "engines.sh: the local-cluster Spark tests were skipped in the engines venv" >&2
    exit 1
fi
# the tutorial and the docs' Spark and Tumult blocks (marked `needs spark` / `needs tumult`: skipped in the main suite)
"$ENGINES_VENV/bin/python" -m pytest tests/test_docs.py -k "04_engines or engines.md" -p no:cacheprovider -q
t2=$(seconds)
echo "engines venv: tests in $((t2 - t1)) s"

# ---------------------------------------------------------------------------------------------------------
# 2. the Spark engine beside the main environment's numpy 2
if [ "${ENGINES_SKIP_NUMPY2:-0}" != "1" ]; then
    [ -x "$SPARK_VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$SPARK_VENV"
    # the extra's pins, without Tumult's numpy < 2: pyspark 3.5 and pandas 2 beside numpy 2
    "$SPARK_VENV/bin/python" -m pip install --quiet "pyspark>=3.5,<3.6" "pandas>=2,<3"
    t3=$(seconds)
    echo "spark-numpy2 venv: installed in $((t3 - t2)) s"
    "$SPARK_VENV/bin/python" -c "from importlib.metadata import version as v; import pyspark, opendp_wgm; print('spark-numpy2 venv:', ', '.join(n + ' ' + v(n) for n in ('numpy', 'pandas', 'pyarrow', 'polars', 'opendp', 'pyspark')))"
    "$SPARK_VENV/bin/python" -m pytest tests/engines/test_spark.py tests/engines/test_spark_group_by.py \
        tests/engines/test_spark_auto.py -p no:cacheprovider -q -rs 2>&1 | tee /tmp/engines-numpy2-pytest.log
    if grep -q "^SKIPPED" /tmp/engines-numpy2-pytest.log; then
        echo "engines.sh: Spark tests were skipped in the numpy 2 venv" >&2
        exit 1
    fi
    echo "spark-numpy2 venv: tests in $(($(seconds) - t3)) s"
fi
echo "engines.sh: done in $(($(seconds) - t0)) s"
