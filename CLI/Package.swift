// swift-tools-version:6.2
import Foundation
import PackageDescription

// The `xfer` command, over the engine in the folder above and the receiver
// (`xfer serve`) in ../Receiver. Kept apart so that an app embedding the
// engine resolves none of what these need (Hummingbird, SwiftNIO,
// swift-argument-parser).
//
// A path dependency's identity is its folder's name, whatever the clone is
// called: it is read from here, not written down.
let engine = URL(fileURLWithPath: Context.packageDirectory).deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "xfer-cli",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "xfer", targets: ["XferCLI"]),
    ],
    dependencies: [
        .package(path: ".."),
        .package(path: "../Receiver"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        // No traits: `FullFoundation` puts full Foundation (DateFormatter) in the form coders and
        // `ConfigurationSupport` brings swift-configuration; the static `xfer` needs neither.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        // For the test server around Apple's resumable-upload handler only;
        // Hummingbird already resolves all three at these versions.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        // `xfer serve`'s /metrics: the receiver's swift-metrics in Prometheus's text format.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        .executableTarget(
            name: "XferCLI",
            dependencies: [
                .product(name: "Xfer", package: engine),
                .product(name: "XferPrimitives", package: engine),
                .product(name: "XferPatch", package: engine),
                .product(name: "XferMultipart", package: engine),
                .product(name: "XferSequence", package: engine),
                .product(name: "XferS3", package: engine),
                .product(name: "XferTus", package: engine),
                .product(name: "XferIETF", package: engine),
                .product(name: "XferReceiver", package: "Receiver"),
                .product(name: "XferReceiverTesting", package: "Receiver"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Sources/XferCLI"
        ),

        // Apple's NIOResumableUpload (IETF resumable uploads draft) serving
        // files, for end-to-end tests against a server written elsewhere.
        .executableTarget(
            name: "apple-resumable-server",
            dependencies: [
                .product(name: "NIOResumableUpload", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            path: "Tests/Tools/AppleResumableServer"),

        // Real processes, servers, LMDB and libcurl (Docs/reliability.md).
        .testTarget(
            name: "XferEndToEndTests",
            dependencies: [
                .product(name: "Xfer", package: engine),
                .product(name: "XferPrimitives", package: engine),
                .product(name: "XferPatch", package: engine),
                .product(name: "XferS3", package: engine),
                .product(name: "XferTestSupport", package: engine),
                .product(name: "CWBackend", package: engine),
                .product(name: "XferReceiver", package: "Receiver"),
                .product(name: "XferReceiverTesting", package: "Receiver"),
                "XferCLI",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/XferEndToEndTests"
        ),
    ]
)
