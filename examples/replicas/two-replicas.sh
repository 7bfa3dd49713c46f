#!/usr/bin/env bash
# Two msgw replicas sharing one PostgreSQL database, beside one external sandbox
# (`msgw sandbox`), all on this machine: what a Deployment with two pods does, to try
# before Kubernetes. See docs/replicas.md, "Two replicas on one machine".
#
#   MSGW_STORE_URL=postgres://postgres@127.0.0.1:5432/test examples/replicas/two-replicas.sh
#       starts them and runs until Ctrl-C;
#   ... two-replicas.sh demo
#       starts them, sends on replica 1 and reads the status and the events on replica 2,
#       starts a verification on replica 1 and checks its code on replica 2, then stops.
#
# Environment: MSGW_STORE_URL (required: the database both replicas share); MSGW (the
# msgw binary, default `msgw` on PATH); BASE_PORT (default 51000: the sandbox takes it,
# replica 1 the next three, replica 2 the three after); RUN_DIR (logs; default a new
# temporary directory). The shared secrets are generated for this run unless set.
# Loopback only: the replicas take every caller (MSGW_ALLOW_UNAUTHENTICATED=true).
set -euo pipefail

: "${MSGW_STORE_URL:?set MSGW_STORE_URL to the PostgreSQL database both replicas share, e.g. postgres://postgres@127.0.0.1:5432/test}"
msgw=${MSGW:-msgw}
base=${BASE_PORT:-51000}
run=${RUN_DIR:-$(mktemp -d)}
mkdir -p "$run"

secret() { head -c 18 /dev/urandom | base64 | tr '+/' '-_'; }
# What every replica must share (msgw refuses a PostgreSQL store without them).
export MSGW_STORE_URL
export MSGW_WEBHOOK_SECRET=${MSGW_WEBHOOK_SECRET:-$(secret)}
export MSGW_ACCOUNT_TOKEN=${MSGW_ACCOUNT_TOKEN:-$(secret)}
export MSGW_VERIFY_SECRET=${MSGW_VERIFY_SECRET:-$(secret)}

sandbox=127.0.0.1:$base
grpc1=127.0.0.1:$((base + 1)) http1=127.0.0.1:$((base + 2)) admin1=127.0.0.1:$((base + 3))
grpc2=127.0.0.1:$((base + 4)) http2=127.0.0.1:$((base + 5)) admin2=127.0.0.1:$((base + 6))

pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT

# The sandbox gateway; pipeline statuses (account webhooks) go to replica 1.
"$msgw" sandbox --addr "$sandbox" \
  --account-webhook-url "http://$http1/v1/webhooks/account/$MSGW_ACCOUNT_TOKEN" \
  >"$run/sandbox.log" 2>&1 &
pids+=($!)

replica() { # name grpc http admin
  MSGW_GRPC_ADDR=$2 MSGW_HTTP_ADDR=$3 MSGW_ADMIN_ADDR=$4 MSGW_PUBLIC_URL=http://$3 \
    MSGW_UPSTREAM_URL=http://$sandbox MSGW_API_KEY=sandbox-api-key \
    MSGW_ALLOW_UNAUTHENTICATED=true \
    "$msgw" serve >"$run/$1.log" 2>&1 &
  pids+=($!)
}
replica replica1 "$grpc1" "$http1" "$admin1"
replica replica2 "$grpc2" "$http2" "$admin2"

ready() { # admin address: /readyz answers 200 once msgw serves
  for _ in $(seq 1 300); do
    curl -fs "http://$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "msgw at $1 did not become ready; its log is in $run" >&2
  exit 1
}
ready "$admin1"
ready "$admin2"
echo "sandbox   $sandbox (its inbox: http://$sandbox/sandbox/)"
echo "replica 1 gRPC $grpc1, admin $admin1"
echo "replica 2 gRPC $grpc2, admin $admin2"
echo "logs      $run"

if [ "${1:-}" != demo ]; then
  echo "running; Ctrl-C stops all three"
  wait
  exit 0
fi

ID=$(date +%s%3N)
echo "== send on replica 1"
grpcurl -plaintext -d "{\"id\": $ID, \"phone\": \"+380971234567\", \"message\": \"Hello from replica 1\", \"signature\": \"msgw\"}" \
  "$grpc1" msgw.v1.MessagingService/SendSms | grep -E '^    "(id|msgId)"'
echo "== its final status, on replica 2"
grpcurl -plaintext -d "{\"id\": $ID, \"wait_for_final\": true}" \
  "$grpc2" msgw.v1.MessagingService/GetMessageStatus | grep -E '^  "(id|status)"'
echo "== its events, on replica 2"
timeout 3 grpcurl -plaintext -d "{\"from_oldest\": true, \"ids\": [$ID]}" \
  "$grpc2" msgw.v1.EventService/StreamStatusEvents 2>/dev/null | grep -E '"rawStatus"' || true

echo "== a verification started on replica 1, its code checked on replica 2"
PHONE=+38097$(printf '%07d' $((ID % 10000000)))
grpcurl -plaintext -d "{\"id\": $((ID + 1)), \"phone\": \"$PHONE\", \"signature\": \"msgw\"}" \
  "$grpc1" msgw.v1.VerificationService/StartVerification | grep -E '"status"'
# The code as the phone would show it: the sandbox's inbox API (sandboxCode is empty
# when the sandbox is not msgw's own).
CODE=
for _ in $(seq 1 50); do
  CODE=$(curl -fs "http://$sandbox/sandbox/api/messages?phone=${PHONE#+}&limit=1" |
    sed -n 's/.*"code":"\([0-9]*\)".*/\1/p')
  [ -n "$CODE" ] && break
  sleep 0.1
done
grpcurl -plaintext -d "{\"phone\": \"$PHONE\", \"code\": \"$CODE\"}" \
  "$grpc2" msgw.v1.VerificationService/CheckVerification | grep -E '"status"'
