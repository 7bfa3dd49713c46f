#!/usr/bin/env python3
"""A protoc plugin that writes gRPC Python stubs (`*_pb2_grpc.py`) with grpcio-tools,
so `buf generate` needs no protoc-gen-grpc_python binary: it hands the request's files
to grpcio-tools' bundled protoc and answers with what it generated."""

import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2


def main():
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        descriptors = os.path.join(tmp, "descriptors.pb")
        with open(descriptors, "wb") as f:
            f.write(descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString())
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        run = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={descriptors}",
             f"--grpc_python_out={out}", *request.file_to_generate],
            capture_output=True, text=True,
        )
        if run.returncode != 0:
            response.error = run.stderr or "grpc_tools.protoc failed"
        else:
            for root, _, files in os.walk(out):
                for name in sorted(files):
                    path = os.path.join(root, name)
                    generated = response.file.add()
                    generated.name = os.path.relpath(path, out)
                    with open(path) as f:
                        generated.content = f.read()
    sys.stdout.buffer.write(response.SerializeToString())


if __name__ == "__main__":
    main()
