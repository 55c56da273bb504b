import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Expiry on disk: a sweep of the uploads whose files nobody touched for `expireAfter`.
extension DiskStorage: UploadExpiring {
    func expire() async {
        guard let expireAfter else { return }
        do {
            let candidates = try await uploads.expiryCandidates(after: expireAfter)
            if !candidates.isEmpty {
                // The protocols' registries let go of those no request holds (theirs hold the
                // uploads beneath); what a request holds stays, and is not expired.
                for store in offsetStores.withLock({ Array($0.values) }) { await store.dropUnlessHeld(candidates) }
                await diskSequenceUploads.dropUnlessHeld(candidates)
                try await uploads.expire(candidates, after: expireAfter)
            }
            // multipart's sources as old, with no unfinished file left (an unfinished one has
            // its data file: it expires by itself first, or it is alive).
            let uploadsDirectory = uploads.layout.uploads
            try await diskMultipartSources.expire(madeBefore: Date() - expireAfter.seconds) { id in
                UploadID.isValid(id) && FileSystemOps.exists(uploadsDirectory + "/" + id + ".data")
            }
        } catch {
            logger.warning("Expiring unfinished uploads failed", metadata: ["error": "\(error)"])
        }
    }
}
