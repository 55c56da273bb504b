"""Stand-ins for the two credential services of a machine in AWS, for xfer's
end-to-end tests: they hand out real temporary credentials of a role, from
the STS of a `s3tool.py serve --auth` server, as those services would.

  credserver.py container STS_URL ROLE_ARN [--authorization TOKEN] [--expires-in SECONDS]
      the container credentials endpoint (ECS, EKS Pod Identity): GET /creds
      answers {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}; with
      --authorization, only to a request whose Authorization header is TOKEN
  credserver.py imds STS_URL ROLE_ARN [--expires-in SECONDS]
      EC2's instance metadata service, IMDSv2 only: PUT /latest/api/token
      (with X-aws-ec2-metadata-token-ttl-seconds) gives a session token, and
      GET /latest/meta-data/iam/security-credentials/ (the role's name) and
      .../ROLE (the credentials) answer only with it (401 without)

Both print "listening on URL", then serve until killed. The credentials say
they expire SECONDS after they were handed out (default 3600; STS's own last
longer, so a client that keeps using them past then is not caught by S3: it
is caught by GET /stats, which answers {"fetches": [{"AccessKeyId",
"issued", "expires"}], "refused": N}, times in seconds since the epoch).
STS is asked with the keys in the environment (AWS_ACCESS_KEY_ID...).
"""
import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


# The tests blank some AWS_* variables; boto3 reads a blank one as a value.
for name in [name for name, value in os.environ.items() if name.startswith("AWS_") and not value]:
    del os.environ[name]


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["container", "imds"])
    parser.add_argument("sts")
    parser.add_argument("role")
    parser.add_argument("--authorization")
    parser.add_argument("--expires-in", type=float, default=3600)
    args = parser.parse_args(argv[1:])

    import boto3

    sts = boto3.client("sts", endpoint_url=args.sts, region_name="us-east-1")
    lock = threading.Lock()
    fetches = []
    refused = [0]
    tokens = set()
    role_name = args.role.rsplit("/", 1)[-1]

    def credentials():
        issued = time.time()
        minted = sts.assume_role(RoleArn=args.role, RoleSessionName=f"credserver-{len(fetches) + 1}")["Credentials"]
        expires = issued + args.expires_in
        with lock:
            fetches.append({"AccessKeyId": minted["AccessKeyId"], "issued": issued, "expires": expires})
        expiration = datetime.fromtimestamp(expires, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"AccessKeyId": minted["AccessKeyId"], "SecretAccessKey": minted["SecretAccessKey"],
                "Token": minted["SessionToken"], "Expiration": expiration}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *arguments):
            pass

        def answer(self, status, body, content_type="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def refuse(self, status, message):
            with lock:
                refused[0] += 1
            self.answer(status, {"code": "Refused", "message": message})

        def do_PUT(self):
            if args.mode != "imds" or self.path != "/latest/api/token":
                return self.answer(404, "not found", "text/plain")
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "").isdigit():
                return self.refuse(400, "missing X-aws-ec2-metadata-token-ttl-seconds")
            token = secrets.token_urlsafe(24)
            with lock:
                tokens.add(token)
            self.answer(200, token, "text/plain")

        def do_GET(self):
            if self.path == "/stats":
                with lock:
                    return self.answer(200, {"fetches": list(fetches), "refused": refused[0]})
            if args.mode == "container":
                if self.path != "/creds":
                    return self.answer(404, {"code": "NotFound", "message": "no such path"})
                if args.authorization is not None and self.headers.get("Authorization") != args.authorization:
                    return self.refuse(401, "wrong or missing Authorization")
                return self.answer(200, credentials())
            with lock:
                known = self.headers.get("X-aws-ec2-metadata-token") in tokens
            if not known:
                return self.refuse(401, "IMDSv2: a session token is required")
            base = "/latest/meta-data/iam/security-credentials/"
            if self.path == base:
                return self.answer(200, role_name, "text/plain")
            if self.path == base + role_name:
                answer = credentials()
                answer.update({"Code": "Success", "Type": "AWS-HMAC",
                               "LastUpdated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
                return self.answer(200, answer)
            self.answer(404, "not found", "text/plain")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv)
