#!/bin/bash
# trainplane trainer bootstrap for one attempt of one job on one EC2 instance.
# Rendered by functions/adapters/launchers/ec2.py: every placeholder in double at-signs is replaced by a shell-quoted
# value. Runs once as root from cloud-init on a GPU Deep Learning AMI (docker, nvidia runtime, awscli).
#
# 1. pull the trainer image (or the job's own image) and run it with the trainer environment contract
#    (schemas/trainer.py); container stdout/stderr go to CloudWatch Logs (awslogs driver);
# 2. watch instance metadata every few seconds: the spot interruption notice (two minutes before
#    reclaim), the trainplane:stop tag (a graceful stop or cancel asked by the control plane) and
#    the runtime limit; each sends the trainer SIGTERM so it checkpoints, then SIGKILL after the grace;
# 3. on exit, whatever happened: write the exit status object to S3 (the launcher's describe() reads
#    it), upload this bootstrap log, and power off; InstanceInitiatedShutdownBehavior=terminate makes
#    that a termination, so an instance never outlives its trainer.
# Multi-node (NODE_COUNT > 1; all N instances run this same script): the node rank is the instance's AMI
# launch index; the master's address comes from the rendezvous object the launcher writes under the
# job's prefix (node 0's private address, from RunInstances); the trainer gets NODE_RANK, NNODES,
# MASTER_ADDR and MASTER_PORT; node k > 0 writes exit-node<k>.json and logs to the stream "...trainer-node<k>".
set -uo pipefail

IMAGE_URI=@@IMAGE_URI@@
REGION=@@REGION@@
JOB_ID=@@JOB_ID@@
ATTEMPT=@@ATTEMPT@@
RUN_SPEC_URI=@@RUN_SPEC_URI@@
EXIT_STATUS_URI=@@EXIT_STATUS_URI@@
BOOTSTRAP_LOG_URI=@@BOOTSTRAP_LOG_URI@@
LOG_GROUP=@@LOG_GROUP@@
LOG_STREAM=@@LOG_STREAM@@
GRACE_SECONDS=@@GRACE_SECONDS@@
MAX_RUNTIME_SECONDS=@@MAX_RUNTIME_SECONDS@@
NODE_COUNT=@@NODE_COUNT@@
RENDEZVOUS_URI=@@RENDEZVOUS_URI@@
RENDEZVOUS_TIMEOUT_SECONDS=@@RENDEZVOUS_TIMEOUT_SECONDS@@
GPU_FLAGS=(@@GPU_FLAGS@@)
TRAINER_ENV=(@@TRAINER_ENV@@)

CONTAINER=trainplane-trainer
STOP_TAG=trainplane:stop
# The TRAINPLANE_UD_* overrides exist for tests/unit/test_ec2_launcher.py, which runs this script
# against fake docker/aws/curl commands; an instance never sets them.
POLL_SECONDS=${TRAINPLANE_UD_POLL_SECONDS:-5}
BOOT_LOG=${TRAINPLANE_UD_BOOT_LOG:-/var/log/trainplane-bootstrap.log}
OPT_ML=${TRAINPLANE_UD_OPT_ML:-/opt/ml}
IMDS=${TRAINPLANE_UD_IMDS:-http://169.254.169.254/latest}
exec > >(tee -a "$BOOT_LOG") 2>&1

imds() {  # IMDSv2: a fresh session token per call keeps the watcher free of token expiry
  local token
  token=$(curl -sf -m 2 -X PUT "$IMDS/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300") || return 1
  curl -sf -m 2 -H "X-aws-ec2-metadata-token: $token" "$IMDS/$1"
}

INSTANCE_ID=$(imds meta-data/instance-id || echo unknown)
STARTED_AT=$(date +%s)
STOP_REASON=""
STOP_PID=""
INTERRUPTED=false
echo "trainplane: job $JOB_ID attempt $ATTEMPT on $INSTANCE_ID, run spec $RUN_SPEC_URI"

finish() {
  trap - ERR
  local code=$1 reason=$2 failure="" oom=false status_file
  status_file=$(mktemp)
  if [ -s "$OPT_ML/output/failure" ]; then failure=$(head -c 1024 "$OPT_ML/output/failure"); fi
  if [ "$(docker inspect -f '{{.State.OOMKilled}}' "$CONTAINER" 2>/dev/null)" = "true" ]; then oom=true; fi
  python3 - "$code" "$reason" "$failure" "$oom" "$INTERRUPTED" "$STARTED_AT" "$INSTANCE_ID" > "$status_file" <<'PY'
import json, sys, time
code, reason, failure, oom, interrupted, started, instance = sys.argv[1:8]
print(json.dumps({"exit_code": int(code), "reason": reason, "failure": failure or None, "oom_killed": oom == "true",
                  "interrupted": interrupted == "true", "started_at": float(started), "ended_at": time.time(),
                  "instance_id": instance}))
PY
  echo "trainplane: trainer exited with $code ($reason); interrupted=$INTERRUPTED"
  aws s3 cp --region "$REGION" "$status_file" "$EXIT_STATUS_URI" || echo "trainplane: could not write $EXIT_STATUS_URI"
  aws s3 cp --region "$REGION" "$BOOT_LOG" "$BOOTSTRAP_LOG_URI" || true
  shutdown -h now
  exit 0
}

# Anything the bootstrap itself fails at is an internal error (exit 70), never a silent idle GPU.
trap 'finish 70 bootstrap-error' ERR

if [ "$NODE_COUNT" -gt 1 ]; then
  NODE_RANK=$(imds meta-data/ami-launch-index) || finish 70 no-launch-index
  if [ "$NODE_RANK" != 0 ]; then
    EXIT_STATUS_URI="${EXIT_STATUS_URI%.json}-node$NODE_RANK.json"
    BOOTSTRAP_LOG_URI="${BOOTSTRAP_LOG_URI%.log}-node$NODE_RANK.log"
    LOG_STREAM="$LOG_STREAM-node$NODE_RANK"
  fi
  RENDEZVOUS_FILE=$(mktemp)
  until aws s3 cp --region "$REGION" "$RENDEZVOUS_URI" - > "$RENDEZVOUS_FILE" 2>/dev/null; do
    if [ $(( $(date +%s) - STARTED_AT )) -ge "$RENDEZVOUS_TIMEOUT_SECONDS" ]; then finish 70 rendezvous-timeout; fi
    sleep "$POLL_SECONDS"
  done
  read -r MASTER_ADDR MASTER_PORT < <(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["master_addr"], r["master_port"])' "$RENDEZVOUS_FILE")
  echo "trainplane: node $NODE_RANK of $NODE_COUNT, master $MASTER_ADDR:$MASTER_PORT"
  TRAINER_ENV+=(-e "NODE_RANK=$NODE_RANK" -e "NNODES=$NODE_COUNT" -e "MASTER_ADDR=$MASTER_ADDR" -e "MASTER_PORT=$MASTER_PORT")
fi

# The image is the deployment's trainer image or a job's own (training_config.image, from a repository the
# deployment allows: docs/SECURITY.md). An ECR registry is logged in to in its own region (the instance
# role may pull from the allowed repositories); any other allowed registry is pulled without a login.
REGISTRY=${IMAGE_URI%%/*}
if [[ "$REGISTRY" =~ ^[0-9]{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$ ]]; then
  aws ecr get-login-password --region "${BASH_REMATCH[1]}" | docker login --username AWS --password-stdin "$REGISTRY"
fi
for try in 1 2 3; do docker pull "$IMAGE_URI" && break; [ "$try" = 3 ] && finish 70 image-pull-failed; sleep $((try * 10)); done
mkdir -p "$OPT_ML/checkpoints" "$OPT_ML/model" "$OPT_ML/output/data" "$OPT_ML/input/config"

docker run -d --name "$CONTAINER" "${GPU_FLAGS[@]}" --network host --ipc host \
  --log-driver awslogs --log-opt awslogs-region="$REGION" --log-opt awslogs-group="$LOG_GROUP" \
  --log-opt awslogs-stream="$LOG_STREAM" --log-opt awslogs-create-group=true \
  -v "$OPT_ML":/opt/ml "${TRAINER_ENV[@]}" "$IMAGE_URI"
trap - ERR

stop_trainer() {  # SIGTERM now, SIGKILL after the grace: the trainer checkpoints in between
  [ -n "$STOP_REASON" ] && return
  STOP_REASON=$1
  echo "trainplane: stopping the trainer ($1), grace ${GRACE_SECONDS}s"
  docker stop -t "$GRACE_SECONDS" "$CONTAINER" >/dev/null &
  STOP_PID=$!
}

while [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER" 2>/dev/null)" = "true" ]; do
  if imds meta-data/spot/instance-action >/dev/null 2>&1; then
    INTERRUPTED=true
    stop_trainer spot-interruption
  fi
  requested=$(imds "meta-data/tags/instance/$STOP_TAG" 2>/dev/null || true)
  if [ -n "$requested" ]; then stop_trainer "stop-$requested"; fi
  if [ "$MAX_RUNTIME_SECONDS" -gt 0 ] && [ $(( $(date +%s) - STARTED_AT )) -ge "$MAX_RUNTIME_SECONDS" ]; then
    stop_trainer max-runtime
  fi
  sleep "$POLL_SECONDS"
done
# Wait for that stop only: a bare `wait` would also wait for the log tee above, forever.
if [ -n "${STOP_PID:-}" ]; then wait "$STOP_PID"; fi
finish "$(docker inspect -f '{{.State.ExitCode}}' "$CONTAINER")" "${STOP_REASON:-exited}"
