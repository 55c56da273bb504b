"""The S3 side of xfer's end-to-end tests, independent of xfer: a moto S3
server on 127.0.0.1, and boto3 to make buckets and read objects back.

  s3tool.py serve [--lose-complete] [--signed-headers-only] [--page-uploads N] [--auth]
                                       prints "listening on URL", then serves until killed;
                                       --lose-complete: the first CompleteMultipartUpload of
                                       each upload completes it but answers 500 (a lost answer),
                                       and later ones answer NoSuchUpload, as S3 may for an
                                       upload it completed;
                                       --signed-headers-only: a request with an x-amz-* header
                                       its signature does not cover is refused (403), as AWS does;
                                       --page-uploads N: ListMultipartUploads answers pages of at most N
                                       uploads (moto pages none), with S3's markers and IsTruncated
                                       --auth: moto checks every request's signature, access key and
                                       session token, as AWS does (its IAM and STS in the same server).
                                       It has a user allowed everything, whose keys it prints after the
                                       URL as "credentials KEY SECRET", and two roles any principal may
                                       assume: arn:aws:iam::123456789012:role/xfer (AssumeRole and
                                       AssumeRoleWithWebIdentity, which AWS takes unsigned) and
                                       .../role/xfer-ext (AssumeRole with ExternalId xfer-external-id).
                                       GET /xfer-test/requests answers what S3 and STS were asked, as
                                       JSON [{"time", "service", "method", "path", "accessKey", and for
                                       STS "params": the form, less any WebIdentityToken}]
  s3tool.py assume URL ROLE_ARN        prints temporary credentials of the role from STS, as JSON
                                       {"AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}
  s3tool.py meta URL BUCKET KEY        prints the object's user metadata as JSON
  s3tool.py type URL BUCKET KEY        prints the object's Content-Type
  s3tool.py describe URL BUCKET KEY    prints what S3 keeps with the object as JSON: ContentType, Metadata,
                                       StorageClass, CacheControl, ContentDisposition, ServerSideEncryption,
                                       Tags, and PublicRead (whether its ACL grants AllUsers READ)
  s3tool.py mkbucket URL BUCKET
  s3tool.py get URL BUCKET KEY OUT     downloads an object; prints its ETag
  s3tool.py uploads URL BUCKET         prints {"uploads": [{"key", "uploadId", "parts", "bytes"}]} (in progress)
  s3tool.py create-upload URL BUCKET KEY...
                                       starts a multipart upload of each KEY; prints each one's UploadId
  s3tool.py objects URL BUCKET         prints {"KEY": "ETAG", ...} for every object

Credentials: whatever the environment says (the tests set dummy ones; moto
accepts any, except under `serve --auth`: there the keys it printed).
"""
import json
import os
import signal
import sys

# The tests blank some AWS_* variables for xfer; boto3 reads a blank one as a value.
for name in [name for name, value in os.environ.items() if name.startswith("AWS_") and not value]:
    del os.environ[name]


def client(url):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def page_of_uploads(body, query, page_size):
    """moto's whole ListMultipartUploads answer cut to the page the query's
    markers and max-uploads ask for, at most page_size uploads, as S3 pages:
    by key, then upload id; after (key-marker, upload-id-marker)."""
    import xml.etree.ElementTree as ET

    namespace = "http://s3.amazonaws.com/doc/2006-03-01/"
    ET.register_namespace("", namespace)
    root = ET.fromstring(body)
    tag = lambda name: f"{{{namespace}}}{name}" if root.tag.startswith("{") else name
    uploads = root.findall(tag("Upload"))
    for upload in uploads:
        root.remove(upload)
    uploads.sort(key=lambda u: (u.findtext(tag("Key")), u.findtext(tag("UploadId"))))
    key_marker = query.get("key-marker", [""])[0]
    id_marker = query.get("upload-id-marker", [""])[0]
    if key_marker:
        uploads = [u for u in uploads if (u.findtext(tag("Key")), u.findtext(tag("UploadId"))) > (key_marker, id_marker)
                   and (id_marker or u.findtext(tag("Key")) > key_marker)]
    size = min(page_size, int(query.get("max-uploads", ["1000"])[0]))
    page, rest = uploads[:size], uploads[size:]
    for name in ("IsTruncated", "NextKeyMarker", "NextUploadIdMarker", "MaxUploads"):
        for element in root.findall(tag(name)):
            root.remove(element)
    def add(name, text):
        element = ET.SubElement(root, tag(name))
        element.text = text
    add("MaxUploads", str(size))
    add("IsTruncated", "true" if rest else "false")
    if rest:
        add("NextKeyMarker", page[-1].findtext(tag("Key")))
        add("NextUploadIdMarker", page[-1].findtext(tag("UploadId")))
    root.extend(page)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/xfer"
EXTERNAL_ID_ROLE = f"arn:aws:iam::{ACCOUNT}:role/xfer-ext"
EXTERNAL_ID = "xfer-external-id"


def set_up_auth(url):
    """The user and roles of `serve --auth`, made while moto still takes
    anything; then moto checks every request. Returns the user's keys."""
    import boto3
    import requests

    iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1",
                       aws_access_key_id="AKIASETUP", aws_secret_access_key="setup")
    everything = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    iam.create_user(UserName="xfer-admin")
    iam.put_user_policy(UserName="xfer-admin", PolicyName="everything", PolicyDocument=everything)
    key = iam.create_access_key(UserName="xfer-admin")["AccessKey"]
    trust = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"},
        {"Effect": "Allow", "Principal": {"Federated": "*"}, "Action": "sts:AssumeRoleWithWebIdentity"}]}
    external = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole",
         "Condition": {"StringEquals": {"sts:ExternalId": EXTERNAL_ID}}}]}
    for name, policy in (("xfer", trust), ("xfer-ext", external)):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(policy))
        iam.put_role_policy(RoleName=name, PolicyName="everything", PolicyDocument=everything)
    requests.post(f"{url}/moto-api/reset-auth", data=b"0").raise_for_status()
    return key["AccessKeyId"], key["SecretAccessKey"]


def allow_unsigned_web_identity():
    """AWS takes AssumeRoleWithWebIdentity unsigned (the token is the
    proof); moto, checking signatures, would fail it for want of one."""
    from moto.sts.responses import TokenResponse

    checked = TokenResponse._authenticate_and_authorize_normal_action

    def authenticate(self, resource="*"):
        if self._get_action() == "AssumeRoleWithWebIdentity" and "Authorization" not in self.headers:
            return
        checked(self, resource)

    TokenResponse._authenticate_and_authorize_normal_action = authenticate


def serve_wrapped(lose_complete, signed_headers_only, page_uploads, auth):
    import io
    import threading
    import time
    from urllib.parse import parse_qs

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    if auth:
        allow_unsigned_web_identity()
    moto = DomainDispatcherApplication(create_backend_app)
    completed = set()
    lock = threading.Lock()
    # What S3 was asked, and with which access key: tests of credentials
    # check that the keys S3 saw are those the credentials' source handed out.
    asked = []

    def refuse(start_response, status, code, message):
        start_response(status, [("Content-Type", "application/xml")])
        return [f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()]

    def unsigned_amz_headers(environ):
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        signed = set()
        if "SignedHeaders=" in authorization:
            signed = set(authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";"))
        present = [key[5:].lower().replace("_", "-") for key in environ if key.startswith("HTTP_X_AMZ_")]
        return [name for name in present if name not in signed]

    def note(environ):
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        scope = authorization.split("Credential=", 1)[-1].split(",", 1)[0].split("/") if authorization else []
        entry = {"time": time.time(), "method": environ["REQUEST_METHOD"], "path": environ.get("PATH_INFO", ""),
                 "accessKey": scope[0] if scope else None, "service": scope[3] if len(scope) >= 4 else None}
        if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            # STS (and IAM): the parameters are the request's form, read here and put back for moto.
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            params = {name: values[0] for name, values in parse_qs(body.decode()).items()}
            params.pop("WebIdentityToken", None)
            entry["service"] = entry["service"] or "sts"  # AssumeRoleWithWebIdentity is unsigned
            entry["params"] = params
        with lock:
            asked.append(entry)

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/xfer-test/requests":
            with lock:
                body = json.dumps(asked).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        if auth:
            note(environ)
        if signed_headers_only:
            unsigned = unsigned_amz_headers(environ)
            if unsigned:
                print(f"refused unsigned headers {unsigned}", flush=True)
                return refuse(start_response, "403 Forbidden", "AccessDenied",
                              "There were headers present in the request which were not signed")
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        if page_uploads and environ["REQUEST_METHOD"] == "GET" and "uploads" in query:
            answer = {}
            body = b"".join(moto(environ, lambda status, headers, *_: answer.update(status=status, headers=headers)))
            if not answer["status"].startswith("200"):
                start_response(answer["status"], answer["headers"])
                return [body]
            body = page_of_uploads(body, query, page_uploads)
            headers = [(name, value) for name, value in answer["headers"] if name.lower() != "content-length"]
            start_response(answer["status"], headers + [("Content-Length", str(len(body)))])
            return [body]
        if not lose_complete or environ["REQUEST_METHOD"] != "POST" or "uploadId" not in query:
            return moto(environ, start_response)
        upload = query["uploadId"][0]
        with lock:
            again = upload in completed
            completed.add(upload)
        if again:
            return refuse(start_response, "404 Not Found", "NoSuchUpload", "The specified upload does not exist.")
        for _ in moto(environ, lambda *args, **kwargs: None):
            pass
        print(f"lost the answer to completing {upload}", flush=True)
        return refuse(start_response, "500 Internal Server Error", "InternalError", "We encountered an internal error.")

    server = make_server("127.0.0.1", 0, app, threaded=True)
    url = f"http://127.0.0.1:{server.server_port}"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not auth:
        print(f"listening on {url}", flush=True)
        server.serve_forever()
        return
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key, secret = set_up_auth(url)
    print(f"listening on {url}", flush=True)
    print(f"credentials {key} {secret}", flush=True)
    while True:
        signal.pause()


def main(argv):
    command = argv[1]
    if command == "serve" and {"--lose-complete", "--signed-headers-only", "--page-uploads", "--auth"} & set(argv[2:]):
        page_uploads = int(argv[argv.index("--page-uploads") + 1]) if "--page-uploads" in argv else 0
        return serve_wrapped("--lose-complete" in argv[2:], "--signed-headers-only" in argv[2:], page_uploads, "--auth" in argv[2:])
    if command == "serve":
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        print(f"listening on http://{host}:{port}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    elif command == "assume":
        import boto3

        sts = boto3.client("sts", endpoint_url=argv[2], region_name="us-east-1")
        credentials = sts.assume_role(RoleArn=argv[3], RoleSessionName="s3tool")["Credentials"]
        print(json.dumps({"AccessKeyId": credentials["AccessKeyId"], "SecretAccessKey": credentials["SecretAccessKey"],
                          "SessionToken": credentials["SessionToken"],
                          "Expiration": credentials["Expiration"].isoformat()}))
    elif command == "mkbucket":
        client(argv[2]).create_bucket(Bucket=argv[3])
    elif command == "get":
        s3 = client(argv[2])
        s3.download_file(argv[3], argv[4], argv[5])
        print(s3.head_object(Bucket=argv[3], Key=argv[4])["ETag"])
    elif command in ("crc32", "crc32c"):
        # The object's CRC-32 (or CRC-32C) as S3 reports it ("none" when it keeps none).
        head = client(argv[2]).head_object(Bucket=argv[3], Key=argv[4], ChecksumMode="ENABLED")
        # AWS writes a composite one "BASE64-PARTS"; moto's HEAD leaves the count off.
        name = "ChecksumCRC32" if command == "crc32" else "ChecksumCRC32C"
        print((head.get(name) or "none").split("-")[0])
    elif command == "describe":
        s3 = client(argv[2])
        head = s3.head_object(Bucket=argv[3], Key=argv[4])
        tags = s3.get_object_tagging(Bucket=argv[3], Key=argv[4])["TagSet"]
        grants = s3.get_object_acl(Bucket=argv[3], Key=argv[4])["Grants"]
        public = any(g.get("Grantee", {}).get("URI", "").endswith("/global/AllUsers") and g.get("Permission") == "READ"
                     for g in grants)
        print(json.dumps({
            "ContentType": head.get("ContentType"), "Metadata": head.get("Metadata", {}),
            "StorageClass": head.get("StorageClass", "STANDARD"), "CacheControl": head.get("CacheControl"),
            "ContentDisposition": head.get("ContentDisposition"), "ServerSideEncryption": head.get("ServerSideEncryption"),
            "Tags": {t["Key"]: t["Value"] for t in tags}, "PublicRead": public,
        }, sort_keys=True))
    elif command == "type":
        print(client(argv[2]).head_object(Bucket=argv[3], Key=argv[4])["ContentType"])
    elif command == "meta":
        print(json.dumps(client(argv[2]).head_object(Bucket=argv[3], Key=argv[4])["Metadata"], sort_keys=True))
    elif command == "create-upload":
        s3 = client(argv[2])
        for key in argv[4:]:
            print(s3.create_multipart_upload(Bucket=argv[3], Key=key)["UploadId"])
    elif command == "uploads":
        s3 = client(argv[2])
        found = []
        pages = s3.get_paginator("list_multipart_uploads").paginate(Bucket=argv[3])
        for upload in (upload for page in pages for upload in page.get("Uploads", [])):
            parts = s3.list_parts(Bucket=argv[3], Key=upload["Key"], UploadId=upload["UploadId"]).get("Parts", [])
            found.append({"key": upload["Key"], "uploadId": upload["UploadId"], "parts": len(parts),
                          "bytes": sum(part["Size"] for part in parts)})
        print(json.dumps({"uploads": found}))
    elif command == "objects":
        found = {}
        for page in client(argv[2]).get_paginator("list_objects_v2").paginate(Bucket=argv[3]):
            for item in page.get("Contents", []):
                found[item["Key"]] = item["ETag"]
        print(json.dumps(found))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
