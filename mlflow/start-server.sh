#!/usr/bin/env bash
# Start an MLflow tracking server for a team's sweeps.
#
#   mlflow/start-server.sh                       # SQLite store + local artifacts under ./mlflow-server, on 127.0.0.1:5000
#   MLFLOW_HOST=0.0.0.0 mlflow/start-server.sh   # listen on every interface (put it behind your network's access control)
#   MLFLOW_BACKEND_STORE=postgresql://user:pass@db/mlflow MLFLOW_ARTIFACTS=/shared/mlartifacts mlflow/start-server.sh
#
# Sweeps log to it with `finesweep run sweep.yaml --tracking-uri http://HOST:PORT` or `tracking.uri` in the sweep file.
set -euo pipefail

DATA_DIR=${MLFLOW_DATA_DIR:-$PWD/mlflow-server}
HOST=${MLFLOW_HOST:-127.0.0.1}
PORT=${MLFLOW_PORT:-5000}
BACKEND=${MLFLOW_BACKEND_STORE:-sqlite:///$DATA_DIR/mlflow.db}
ARTIFACTS=${MLFLOW_ARTIFACTS:-$DATA_DIR/artifacts}
WORKERS=${MLFLOW_WORKERS:-2}

mkdir -p "$DATA_DIR"
case "$ARTIFACTS" in *://*) ;; *) mkdir -p "$ARTIFACTS" ;; esac
echo "MLflow tracking server on http://$HOST:$PORT (backend $BACKEND, artifacts $ARTIFACTS)"
# --serve-artifacts proxies artifact uploads, so trials on other machines need no access to the artifact store.
exec "${PYTHON:-python}" -m mlflow server \
    --backend-store-uri "$BACKEND" \
    --artifacts-destination "$ARTIFACTS" --serve-artifacts \
    --host "$HOST" --port "$PORT" --workers "$WORKERS"
