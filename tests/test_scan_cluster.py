"""Cluster mode is real: a Spark standalone master and two workers on 127.0.0.1, and `txnadmin scan --master`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dumpgen as g
from txnadmin.server.run import free_port


def _wait_port(port: int, proc, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"spark process exited with {proc.returncode}") from None
            time.sleep(0.2)
    raise TimeoutError(f"nothing listening on {port}")


@pytest.mark.spark
@pytest.mark.slow
def test_standalone_cluster_gives_the_same_report_as_local(tmp_path):
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_WORKER_DIR=str(tmp_path / "work"))
    d = tmp_path / "dumps"
    d.mkdir()
    g.write_entry_log(d / "0.log", [(10, 0, g.batched(2)), (10, 1, g.plain(1)), (12, 0, g.pulsar_message(0))])
    g.write_entry_log(d / "1.log", [(11, 0, g.batched(1)), (9, 0, g.batched(3))])
    g.write_entry_log(d / "2.log", [(13, 0, g.plain(0)), (13, 1, g.plain(1))], corrupt={(13, 1)})
    g.ledger_list(tmp_path / "ledgers.txt", {10: g.TC_ML.format(0), 11: g.ACK_ML, 12: g.MSG_ML, 13: g.TC_ML.format(1)},
                  last={10: 1, 11: 0, 12: 0, 13: 1})
    port = free_port()
    spark_class = str(spark_home / "bin" / "spark-class")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        _wait_port(port, master)
        for _ in range(2):  # two one-core workers: the groups really run in two executors
            workers.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                                             f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "1",
                                             "--memory", "1g", "--webui-port", str(free_port())], env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        args = [str(d), "--ledgers", str(tmp_path / "ledgers.txt"), "-o", "json"]
        cli = [sys.executable, "-m", "txnadmin.cli.main", "scan"]
        clustered = subprocess.run(cli + args + ["--master", f"spark://127.0.0.1:{port}"], env=env,
                                   capture_output=True, text=True, timeout=240)
        local = subprocess.run(cli + args + ["--engine", "python"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        for proc in (*workers, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert clustered.returncode == 1, clustered.stderr[-2000:]
    a, b = json.loads(clustered.stdout), json.loads(local.stdout)
    assert a.pop("engine") == f"spark (spark://127.0.0.1:{port})"
    b.pop("engine")
    assert a == b
    assert a["liveBatchedEntries"] == 2 and [t["ledgerId"] for t in a["trimmedLedgers"]] == [9]
