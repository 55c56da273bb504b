// swift-tools-version:6.2
import Foundation
import PackageDescription

// The receiver behind `xfer serve`, as a package others embed: each
// protocol's routes (patch, multipart, sequence, tus, ietf, raw PUT and the
// downloads) mountable in any Hummingbird application, on the storage it is
// given. The command's package (CLI/) depends on it; so can an app's server.
//
// It needs the engine's package (the folder above) for three of its products,
// never the engine itself: XferPrimitives (hex, CRCs, chunk sets), XferWire
// (each protocol's wire, shared with the client backends) and, for
// uploads on an object store, XferS3Core (Signature V4, the S3 requests and
// answers, the AWS credentials chain), which the `s3` backend shares and
// which sends nothing itself: the receiver sends with AsyncHTTPClient, so an
// app that mounts its routes links neither LMDB nor libcurl (the engine's),
// as `make test-linkage` checks. A path dependency's identity is its folder's name,
// whatever the clone is called: it is read from here, not written down.
let engine = URL(fileURLWithPath: Context.packageDirectory).deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "xfer-receiver",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "XferReceiver", targets: ["XferReceiver"]),
        // Fault injection, held and stalled requests, failed merges: for tests
        // of clients against a receiver that misbehaves on purpose. Kept out
        // of XferReceiver so that a production configuration cannot hold them.
        .library(name: "XferReceiverTesting", targets: ["XferReceiverTesting"]),
    ],
    dependencies: [
        .package(path: ".."),
        // No traits: `FullFoundation` puts full Foundation (DateFormatter) in the form coders and
        // `ConfigurationSupport` brings swift-configuration; the static `xfer` needs neither.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        // The object storage's requests to the store (bodies stream from a client's request
        // straight into them) and its credentials' requests (STS, metadata endpoints).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // Counters and timers through the metrics facade; the program serving them picks the
        // backend (`xfer serve`: Prometheus).
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
    ],
    targets: [
        .target(
            name: "XferReceiver",
            dependencies: [
                .product(name: "XferPrimitives", package: engine),
                // Every protocol's headers, bodies and answers, the same code the client backends
                // speak them with (one Content-Range, one digest header, one JSON codec).
                .product(name: "XferWire", package: engine),
                // The object storage speaks S3 through the `s3` backend's own descriptions of
                // requests and readings of answers (signing, credentials, XML, errors): one S3
                // client, not a second copy; without the engine (no LMDB, no libcurl).
                .product(name: "XferS3Core", package: engine),
                .product(name: "Hummingbird", package: "hummingbird"),
                // HTTPS (`xfer serve --tls-cert`), over the swift-nio-ssl AsyncHTTPClient brings already.
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            path: "Sources/XferReceiver",
            // The upload page (`GET /`), compiled into the binary: an installed `xfer` is one file.
            resources: [
                .embedInCode("UploadPage/index.html"),
                .embedInCode("UploadPage/upload.js"),
                .embedInCode("UploadPage/upload.css"),
            ]
        ),
        .target(
            name: "XferReceiverTesting",
            dependencies: [
                "XferReceiver",
                // Injected refusals read as the receiver's own (`ErrorBody`).
                .product(name: "XferWire", package: engine),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Sources/XferReceiverTesting"
        ),
        // Route-level tests: the router driven without sockets
        // (HummingbirdTesting's `.router`), and the storage's pure parts.
        .testTarget(
            name: "XferReceiverTests",
            dependencies: [
                "XferReceiver", "XferReceiverTesting",
                .product(name: "XferPrimitives", package: engine),
                .product(name: "XferWire", package: engine),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                // Digests of served files, computed apart from the receiver's own.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/XferReceiverTests"
        ),
    ]
)
