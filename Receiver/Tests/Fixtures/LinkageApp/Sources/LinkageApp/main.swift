import Foundation
import Hummingbird
import Logging
import XferReceiver

// Mounts every protocol's routes under /uploads of an app's own router, next to a route of the
// app's, over disk storage in the directory given, or over an object store when `s3://BUCKET` is
// given (so the object storage's client is reached from here too), then exits: what is checked
// is what the binary links, and that it runs.
let logger = Logger(label: "linkage-app")
let arguments = CommandLine.arguments
guard arguments.count == 2 else {
    FileHandle.standardError.write(Data("usage: LinkageApp ROOT | s3://BUCKET\n".utf8))
    exit(2)
}
var configuration = ReceiverConfiguration(root: arguments[1])
if arguments[1].hasPrefix("s3://") {
    // Described only, never opened: no store is reachable where this runs. The credentials come
    // through the receiver's own resolution (XferS3Core's chain, sent by AsyncHTTPClient).
    let aws = try ObjectStoreLocation.resolveConfiguration(
        environment: ["AWS_ACCESS_KEY_ID": "AKIDLINKAGE", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_EC2_METADATA_DISABLED": "true"])
    configuration.objectStore = ObjectStoreLocation(bucket: String(arguments[1].dropFirst(5)), prefix: "", configuration: aws)
    print("described s3://\(configuration.objectStore!.bucket) with credentials from \(aws.source)")
    exit(0)
}
let routes = try await ReceiverRoutes.open(configuration, logger: logger)
let router = Router(context: ReceiverContext.self)
router.get("/app") { _, _ in "the app's own route" }
routes.register(on: router.group("uploads"))
_ = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: logger)
print("mounted")
