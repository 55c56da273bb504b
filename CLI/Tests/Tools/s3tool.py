"""The S3 side of xfer's end-to-end tests, independent of xfer: a moto S3
server on 127.0.0.1, and boto3 to make buckets and read objects back.

  s3tool.py serve [--lose-complete] [--signed-headers-only] [--page-uploads N] [--auth] [--aws-checksums [--misreport-parts]]
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
                                       --aws-checksums: checksums as AWS treats them, where moto 5.2 does
                                       not: a PutObject's or UploadPart's x-amz-checksum-* is checked against
                                       the body, a CompleteMultipartUpload's FULL_OBJECT one against the
                                       parts (400 BadDigest, as AWS; moto keeps any value it is sent);
                                       HeadObject reports a composite checksum with its -N and type (moto
                                       leaves both off); GetObjectAttributes lists ObjectParts (moto lists
                                       none), paged by x-amz-max-parts and x-amz-part-number-marker;
                                       with --misreport-parts, part 1's listed checksum is not its bytes
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
  s3tool.py checksums URL BUCKET KEY   prints the checksums HeadObject reports (x-amz-checksum-mode: ENABLED) as
                                       JSON {"CRC64NVME": BASE64, ..., "type": FULL_OBJECT|COMPOSITE|null}
  s3tool.py crc64nvme FILE             prints the file's CRC64NVME as S3 writes it (base64), by awscrt
  s3tool.py put-checksum URL BUCKET KEY FILE ALGORITHM VALUE
                                       PutObject of FILE claiming checksum VALUE (base64) by ALGORITHM (moto
                                       keeps what it is told: an object whose checksum is wrong)
  s3tool.py put-parts URL BUCKET KEY FILE PART_SIZE ALGORITHM [FULL_OBJECT|COMPOSITE]
                                       a multipart upload of FILE in parts of PART_SIZE, each with its
                                       checksum by ALGORITHM, of that type (default COMPOSITE)

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


def client(url, **config):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config))


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


# (bucket, key) -> [(part number, size, checksum)] of the last completion of each key (--aws-checksums).
COMPLETED_PARTS = {}
# --misreport-parts: GetObjectAttributes lists part 1 with a checksum its bytes do not have.
MISREPORT_PARTS = False


def checksums_as_aws(moto, environ, start_response, query):
    """--aws-checksums (see the module's text): the answer, or None to let moto answer alone."""
    import io
    import xml.etree.ElementTree as ET

    from moto.s3.models import s3_backends
    from moto.s3.utils import compute_checksum

    backend = s3_backends[ACCOUNT]["aws"]
    method = environ["REQUEST_METHOD"]
    parts = environ.get("PATH_INFO", "").lstrip("/").split("/", 1)
    if len(parts) != 2 or not parts[1]:
        return None
    bucket, key = parts
    algorithm = next((name[len("HTTP_X_AMZ_CHECKSUM_"):] for name in environ
                      if name.startswith("HTTP_X_AMZ_CHECKSUM_") and name not in ("HTTP_X_AMZ_CHECKSUM_TYPE",
                                                                                   "HTTP_X_AMZ_CHECKSUM_MODE",
                                                                                   "HTTP_X_AMZ_CHECKSUM_ALGORITHM")), None)

    def bad_digest(what):
        print(f"refused {what}: BadDigest", flush=True)
        start_response("400 Bad Request", [("Content-Type", "application/xml")])
        return [b"<Error><Code>BadDigest</Code><Message>The " + what.encode() + b" you specified did not match the calculated checksum.</Message></Error>"]

    def answer_of(environ):
        answer = {}
        body = b"".join(moto(environ, lambda status, headers, *_: answer.update(status=status, headers=headers)))
        return answer["status"], answer["headers"], body

    if method == "PUT" and algorithm and "HTTP_X_AMZ_COPY_SOURCE" not in environ:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        sent = environ["HTTP_X_AMZ_CHECKSUM_" + algorithm]
        if compute_checksum(body, algorithm).decode() != sent:
            return bad_digest(f"{algorithm} of the body")
        return None
    if method == "POST" and "uploadId" in query:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        upload = backend.get_bucket(bucket).multiparts.get(query["uploadId"][0])
        if upload is None:
            return None
        numbers = [int(element.text) for element in ET.fromstring(body).iter() if element.tag.endswith("PartNumber")]
        named = upload.metadata.get("x-amz-checksum-algorithm")
        # moto drops the parts' bytes once it completes: what GetObjectAttributes lists is kept now.
        COMPLETED_PARTS[(bucket, key)] = [
            (number, len(upload.parts[number].value),
             compute_checksum(upload.parts[number].value, named).decode() if named else None)
            for number in numbers if number in upload.parts]
        if algorithm and environ.get("HTTP_X_AMZ_CHECKSUM_TYPE") == "FULL_OBJECT":
            whole = b"".join(upload.parts[number].value for number in numbers if number in upload.parts)
            if compute_checksum(whole, algorithm).decode() != environ["HTTP_X_AMZ_CHECKSUM_" + algorithm]:
                return bad_digest(f"full-object {algorithm}")
        return None
    if method == "HEAD" and environ.get("HTTP_X_AMZ_CHECKSUM_MODE") == "ENABLED":
        status, headers, body = answer_of(environ)
        stored = backend.get_bucket(bucket).keys.get(key) if status.startswith("200") else None
        if stored is not None and getattr(stored, "checksum_type", None) == "COMPOSITE":
            name = "x-amz-checksum-" + stored.checksum_algorithm.lower()
            headers = [(n, v) for n, v in headers if n.lower() not in (name, "x-amz-checksum-type")]
            headers += [(name, f"{stored.checksum_value}-{stored.checksum_parts}"), ("x-amz-checksum-type", "COMPOSITE")]
        start_response(status, headers)
        return [body]
    if method == "GET" and "attributes" in query and "ObjectParts" in environ.get("HTTP_X_AMZ_OBJECT_ATTRIBUTES", ""):
        status, headers, body = answer_of(environ)
        stored = backend.get_bucket(bucket).keys.get(key) if status.startswith("200") else None
        kept = COMPLETED_PARTS.get((bucket, key))
        if stored is None or not stored.multipart or kept is None:
            start_response(status, headers)
            return [body]
        root = ET.fromstring(body)
        namespace = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        # Written back with S3's default namespace, not ElementTree's ns0: prefix.
        if namespace:
            ET.register_namespace("", namespace[1:-1])
        listing = ET.SubElement(root, namespace + "ObjectParts")
        numbers = [number for number, _, _ in kept]
        sizes = {number: (size, checksum) for number, size, checksum in kept}
        marker = int(environ.get("HTTP_X_AMZ_PART_NUMBER_MARKER") or 0)
        size = int(environ.get("HTTP_X_AMZ_MAX_PARTS") or 1000)
        after = [number for number in numbers if number > marker]
        page, rest = after[:size], after[size:]
        def add(parent, name, text):
            ET.SubElement(parent, namespace + name).text = str(text)
        add(listing, "PartsCount", len(numbers))
        add(listing, "PartNumberMarker", marker)
        add(listing, "MaxParts", size)
        add(listing, "IsTruncated", "true" if rest else "false")
        if rest:
            add(listing, "NextPartNumberMarker", page[-1])
        for number in page:
            part = ET.SubElement(listing, namespace + "Part")
            add(part, "PartNumber", number)
            add(part, "Size", sizes[number][0])
            if getattr(stored, "checksum_type", None) == "COMPOSITE" and sizes[number][1]:
                listed = sizes[number][1]
                if MISREPORT_PARTS and number == 1:
                    # --misreport-parts: part 1's checksum as other bytes would have it.
                    import base64
                    digest = bytearray(base64.b64decode(listed))
                    digest[0] ^= 0xFF
                    listed = base64.b64encode(bytes(digest)).decode()
                add(part, "Checksum" + stored.checksum_algorithm, listed)
        body = ET.tostring(root, encoding="utf-8", xml_declaration=True)
        headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
        start_response(status, headers + [("Content-Length", str(len(body)))])
        return [body]
    return None


def serve_wrapped(lose_complete, signed_headers_only, page_uploads, auth, aws_checksums=False):
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
        if aws_checksums:
            answered = checksums_as_aws(moto, environ, start_response, query)
            if answered is not None:
                return answered
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
    if command == "serve" and {"--lose-complete", "--signed-headers-only", "--page-uploads", "--auth", "--aws-checksums"} & set(argv[2:]):
        global MISREPORT_PARTS
        MISREPORT_PARTS = "--misreport-parts" in argv[2:]
        page_uploads = int(argv[argv.index("--page-uploads") + 1]) if "--page-uploads" in argv else 0
        return serve_wrapped("--lose-complete" in argv[2:], "--signed-headers-only" in argv[2:], page_uploads, "--auth" in argv[2:],
                             "--aws-checksums" in argv[2:])
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
    elif command == "checksums":
        head = client(argv[2]).head_object(Bucket=argv[3], Key=argv[4], ChecksumMode="ENABLED")
        found = {name[len("Checksum"):]: value for name, value in head.items()
                 if name.startswith("Checksum") and name != "ChecksumType"}
        found["type"] = head.get("ChecksumType")
        print(json.dumps(found, sort_keys=True))
    elif command == "crc64nvme":
        import base64
        from awscrt import checksums

        with open(argv[2], "rb") as file:
            crc = 0
            while block := file.read(1 << 20):
                crc = checksums.crc64nvme(block, crc)
        print(base64.b64encode(crc.to_bytes(8, "big")).decode())
    elif command == "put-checksum":
        with open(argv[5], "rb") as file:
            body = file.read()
        # The checksum header as sent, with the algorithm named as moto wants it (x-amz-sdk-checksum-algorithm).
        # Only the checksum named here: botocore adds a CRC-32 of its own otherwise.
        s3 = client(argv[2], request_checksum_calculation="when_required")
        name, value = argv[6], argv[7]

        def claim(request, **_):
            request.headers["x-amz-checksum-" + name.lower()] = value
            request.headers["x-amz-sdk-checksum-algorithm"] = name

        s3.meta.events.register("before-sign.s3.PutObject", claim)
        s3.put_object(Bucket=argv[3], Key=argv[4], Body=body)
    elif command == "put-parts":
        from moto.s3.utils import compute_checksum

        s3 = client(argv[2], request_checksum_calculation="when_required")
        bucket, key, size, algorithm = argv[3], argv[4], int(argv[6]), argv[7]
        kind = argv[8] if len(argv) > 8 else "COMPOSITE"
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm, ChecksumType=kind)["UploadId"]
        done = []
        with open(argv[5], "rb") as file:
            number = 1
            while block := file.read(size):
                checksum = compute_checksum(block, algorithm).decode()
                answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=block,
                                        **{"Checksum" + algorithm: checksum})
                done.append({"PartNumber": number, "ETag": answer["ETag"], "Checksum" + algorithm: checksum})
                number += 1
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done})
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
