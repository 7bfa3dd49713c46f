#!/usr/bin/env python3
"""msgw from Python: send an SMS, run a Batch, wait for the final status, read
the google.rpc error details of a refused call, verify a phone number, and schedule
a message (then cancel it).

    pip install -r requirements.txt
    python quickstart.py --addr localhost:50051

The gRPC stubs are generated from msgw's proto/ with grpcio-tools on first run (into
./gen); google.type.Money and google.rpc details come from googleapis-common-protos.
"""

import argparse
import os
import subprocess
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.environ.get("MSGW_PROTO_DIR", os.path.join(HERE, "..", "..", "proto"))
GEN = os.environ.get("MSGW_GEN_DIR", os.path.join(HERE, "gen"))


def generate():
    """Generates msgw's stubs (msgw/v1/*_pb2.py, *_pb2_grpc.py) unless present."""
    if os.path.exists(os.path.join(GEN, "msgw", "v1", "messaging_pb2_grpc.py")):
        return
    os.makedirs(GEN, exist_ok=True)
    protos = sorted(
        os.path.join("msgw", "v1", f)
        for f in os.listdir(os.path.join(PROTO, "msgw", "v1"))
        if f.endswith(".proto")
    )
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}",
         f"--python_out={GEN}", f"--grpc_python_out={GEN}", *protos],
        check=True,
    )


generate()
sys.path.insert(0, GEN)

import grpc  # noqa: E402
from google.rpc import error_details_pb2  # noqa: E402
from grpc_status import rpc_status  # noqa: E402
from msgw.v1 import account_pb2, account_pb2_grpc  # noqa: E402
from msgw.v1 import messaging_pb2, messaging_pb2_grpc  # noqa: E402
from msgw.v1 import verification_pb2, verification_pb2_grpc  # noqa: E402


def money(m):
    """google.type.Money as an exact Decimal and its currency."""
    return Decimal(m.units) + Decimal(m.nanos) / Decimal(1_000_000_000), m.currency_code


def details(error):
    """The google.rpc details of a failed call: (ErrorInfo reason, [field, ...])."""
    status = rpc_status.from_call(error)
    reason, fields = None, []
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields = [v.field for v in bad.field_violations]
    return reason, fields


def sms(id_, phone="380971234567"):
    return messaging_pb2.SendSmsRequest(
        id=id_, phone=phone, message="Your code is 1234", signature="msgw"
    )


def open_channel(addr):
    """Plaintext, or TLS when MSGW_CA_FILE names the CA that signs msgw's certificate;
    with MSGW_CERT_FILE and MSGW_KEY_FILE also a client certificate (mTLS).
    MSGW_SERVER_NAME overrides the name checked in msgw's certificate."""
    ca = os.environ.get("MSGW_CA_FILE")
    if not ca:
        return grpc.insecure_channel(addr)

    def read(variable):
        path = os.environ.get(variable)
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read("MSGW_CA_FILE"),
        private_key=read("MSGW_KEY_FILE"),
        certificate_chain=read("MSGW_CERT_FILE"),
    )
    name = os.environ.get("MSGW_SERVER_NAME")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(addr, credentials, options)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="localhost:50051")
    parser.add_argument("--id", type=int, default=int(time.time() * 1000) % 10**12)
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for the final status")
    args = parser.parse_args()

    # A msgw that authenticates its callers wants `authorization: Bearer <token>` on
    # every call (health and reflection excepted).
    token = os.environ.get("MSGW_TOKEN")
    auth = [("authorization", f"Bearer {token}")] if token else []

    with open_channel(args.addr) as channel:
        messaging = messaging_pb2_grpc.MessagingServiceStub(channel)
        account = account_pb2_grpc.AccountServiceStub(channel)

        # 1. Send. The id is the idempotency key: retrying with it never sends twice.
        sent = messaging.SendSms(sms(args.id), timeout=10, metadata=auth)
        print(f"sent {sent.receipt.id}: msg_id {sent.receipt.msg_id}, {sent.receipt.parts} part(s)")

        # 2. Batch: several operations in one gateway request, one status each.
        batch = messaging.Batch(
            messaging_pb2.BatchRequest(items=[
                messaging_pb2.BatchItem(send_sms=sms(args.id + 1)),
                messaging_pb2.BatchItem(get_balance=account_pb2.GetBalanceRequest()),
            ]),
            timeout=10,
            metadata=auth,
        )
        for i, result in enumerate(batch.results):
            print(f"batch item {i}: code {result.status.code} ({result.WhichOneof('result')})")
            if result.HasField("get_balance"):
                amount, currency = money(result.get_balance.amount)
                print(f"balance {amount} {currency}")

        # 3. Wait for the final status: one call, answered when it is final (or at
        #    the deadline with the newest status, is_final false).
        status = messaging.GetMessageStatus(
            messaging_pb2.GetMessageStatusRequest(id=args.id, wait_for_final=True),
            timeout=args.wait,
            metadata=auth,
        )
        print(f"status of {args.id}: {status.raw_status} (final: {status.is_final})")

        # 4. A refused call: INVALID_ARGUMENT with a BadRequest naming each field.
        try:
            messaging.SendSms(sms(args.id + 2, phone="12"), timeout=10, metadata=auth)
            print("unexpected: the invalid request was accepted")
            return 1
        except grpc.RpcError as error:
            reason, fields = details(error)
            print(f"refused: {error.code().name}, fields {fields}")

        balance = account.GetBalance(account_pb2.GetBalanceRequest(), timeout=10, metadata=auth)
        amount, currency = money(balance.amount)
        print(f"balance {amount} {currency}")

        # 5. Verify a phone number: msgw makes the code, sends it and checks it.
        verification = verification_pb2_grpc.VerificationServiceStub(channel)
        phone = f"+38097{args.id % 10**7:07d}"
        started = verification.StartVerification(
            verification_pb2.StartVerificationRequest(id=args.id + 3, phone=phone, signature="msgw"),
            timeout=10,
            metadata=auth,
        ).verification
        state = verification_pb2.VerificationStatus.Name
        print(f"verification {started.id}: {state(started.status)}, {started.checks_left} checks left")
        wrong = verification.CheckVerification(
            verification_pb2.CheckVerificationRequest(phone=phone, code="0000"),
            timeout=10,
            metadata=auth,
        ).verification
        print(f"wrong code: {wrong.checks_left} checks left")
        # Only the built-in sandbox tells the code; with a real gateway the user types it.
        if started.sandbox_code:
            checked = verification.CheckVerification(
                verification_pb2.CheckVerificationRequest(phone=phone, code=started.sandbox_code),
                timeout=10,
                metadata=auth,
            ).verification
            print(f"verified: {state(checked.status)}")

        # 6. Schedule a reminder for tomorrow: msgw keeps it and sends it then, exactly
        #    once, unless it is cancelled before it leaves.
        reminder = sms(args.id + 4)
        reminder.send_at.FromSeconds(int(time.time()) + 86_400)
        scheduled = messaging.SendSms(reminder, timeout=10, metadata=auth).receipt
        print(f"scheduled {scheduled.id} for {scheduled.scheduled_for.ToJsonString()}")
        cancelled = messaging.CancelMessage(
            messaging_pb2.CancelMessageRequest(id=args.id + 4), timeout=10, metadata=auth
        )
        print(f"cancelled {cancelled.id}, due {cancelled.send_at.ToJsonString()}")
        return 0 if status.is_final else 2


if __name__ == "__main__":
    sys.exit(main())
