import XCTest
import Xfer
import XferIETF
import XferMultipart
import XferPatch
import XferSequence
import XferTus

/// A tree of small files is bound by round trips: with no number named,
/// every built-in protocol lets its small requests go wider than its large
/// chunks, which keep the concurrency that bounds what a kill sends again
/// (s3, built from a configuration, is left out here: its traits say 64).
final class SmallRequestDefaultsTests: XCTestCase {
    func testEveryBuiltInBackendSendsSmallRequestsWide() {
        let backends: [any UploadBackend] = [
            PatchBackend(), MultipartBackend(), SequenceBackend(), TusBackend(), IETFBackend(),
        ]
        for backend in backends {
            let traits = backend.traits
            guard let wide = traits.smallRequestConcurrency else {
                XCTFail("\(backend.name) sends small requests only \(traits.defaultConcurrency) at a time")
                continue
            }
            XCTAssertGreaterThanOrEqual(wide, 4 * traits.defaultConcurrency, backend.name)
            XCTAssertLessThanOrEqual(wide, 64, backend.name)
        }
    }
}
