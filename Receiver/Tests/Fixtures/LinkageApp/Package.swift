// swift-tools-version:6.2
import PackageDescription

// An application of someone else's that mounts the receiver's routes in its own Hummingbird
// server, depending on the receiver's package alone: scripts/test-linkage.sh builds it and
// checks that it links neither LMDB nor libcurl (the engine's), as the receiver's package
// promises (Receiver/Package.swift). Not part of any product.
let package = Package(
    name: "LinkageApp",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: "../../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: []),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .executableTarget(
            name: "LinkageApp",
            dependencies: [
                .product(name: "XferReceiver", package: "Receiver"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/LinkageApp"),
    ]
)
