import AsyncHTTPClient
import Crypto
import FoundationEssentials
import Hummingbird
import Logging
import NIOCore
import Synchronization
import XferPrimitives
import XferS3Core

/// Expiry on an object store: an expired upload is dropped by whichever receiver meets it first
/// (`ObjectStorage.readState`), or by a sweep each receiver runs now and then.
extension ObjectStorage: UploadExpiring {
    /// Whether an unfinished upload last changed at `lastChanged` has expired. (A state is
    /// replaced by every change, an append's claim renewals included: its age is its idleness.)
    func isExpired(lastChanged: Date?) -> Bool {
        guard let expireAfter, let lastChanged else { return false }
        return Date().timeIntervalSince(lastChanged) > expireAfter.seconds
    }

    /// A chunked upload of several records its chunks apart, leaving its state unchanged: it is
    /// idle when its newest chunk record is too (asked only of a state that looks expired).
    func isExpired(chunksOf id: String, recordedApart: Bool) async throws -> Bool {
        guard recordedApart else { return true }
        let newest = try await objects(under: layout.receivedPrefix(id)).compactMap(\.lastModified).max()
        return newest.map { isExpired(lastChanged: $0) } ?? true
    }

    /// Drops the unfinished uploads nobody touched for `expireAfter`: one sweep, which the
    /// receiver's upkeep runs every quarter of it (at most every minute, at least every second).
    /// Each receiver sweeps; a drop is the same whoever does it, and a repeated one finds nothing.
    /// An offset upload whose every byte is acknowledged is completed instead (its completion
    /// failed and no request came back to finish it), and `sweepFinished` hears of it if this
    /// sweep did it.
    ///
    /// A sweep reads the uploads that may be unfinished, by their pending markers
    /// (`ObjectLayout.pending`), a page at a time: what it costs follows the unfinished uploads,
    /// not the completed ones the store keeps, whose states every sweep read before. A marker
    /// younger than the expiry names an upload too young to expire; an older one has its state
    /// read (which drops it if idle, or finishes a deletion), and goes once the upload is
    /// completed or gone. States written by receivers before the markers have none: each receiver
    /// also reads every state, as sweeps did before, at its first sweep and then once an hour (or
    /// once an expiry, if longer).
    func expire() async {
        guard let expireAfter else { return }
        let finished = sweepFinished.withLock { $0 }
        await sweepPending(reporting: finished)
        let now = ContinuousClock.now
        let due = nextFullSweep.withLock { next -> Bool in
            guard next.map({ now >= $0 }) ?? true else { return false }
            next = now + max(expireAfter, Self.fullSweepInterval)
            return true
        }
        if due { await sweepStates(reporting: finished) }
    }

    /// How often a receiver reads every state, for those without a marker.
    static let fullSweepInterval = Duration.seconds(3600)

    private func sweepPending(reporting finished: @Sendable (FinishedUpload) async -> Void) async {
        await forEachObjectOlderThanTheExpiry(under: layout.pendingPrefix) { name in
            let id = String(name)
            let found: (ObjectUploadState, S3ETag)?
            do { found = try await readState(id) } catch { return }  // the next sweep tries again
            guard let read = found else {
                // Gone (dropped just now, deleted, or never created): so is its marker.
                await unmarkPending(id)
                return
            }
            if read.0.isDueForCompletion { await finishDue(read, reporting: finished) }
            if read.0.completion != nil { await unmarkPending(id) }
        }
    }

    /// Every state, as sweeps read them before the markers.
    private func sweepStates(reporting finished: @Sendable (FinishedUpload) async -> Void) async {
        await forEachObjectOlderThanTheExpiry(under: layout.uploadsPrefix) { name in
            guard name.hasSuffix(".json") else { return }
            // Read again: the state decides (a completed upload stays; a fresh change wins).
            guard let read = try? await readState(String(name.dropLast(".json".count))), read.0.isDueForCompletion else { return }
            await finishDue(read, reporting: finished)
        }
    }

    /// Calls `body` with the name below `prefix` of each object there that nobody changed for the
    /// expiry, a listing page at a time. A listing that fails ends the walk: the next sweep walks again.
    private func forEachObjectOlderThanTheExpiry(under prefix: String, _ body: (Substring) async -> Void) async {
        var token: String?
        repeat {
            guard let page = try? await client.perform({ client.requests.listObjects(prefix: prefix, continuationToken: token) })
            else { break }
            for object in page.objects where isExpired(lastChanged: object.lastModified) { await body(object.key.dropFirst(prefix.count)) }
            token = page.nextContinuationToken
        } while token != nil && !Task.isCancelled
    }

    func reportSweptCompletions(to report: @escaping @Sendable (FinishedUpload) async -> Void) {
        sweepFinished.withLock { $0 = report }
    }

    /// Completes an offset upload whose every byte is acknowledged, as a request would
    /// (`ObjectOffsetUpload.finish`), and reports it when this call completed it (partial uploads
    /// aside: their final upload is the file).
    private func finishDue(_ read: (ObjectUploadState, S3ETag), reporting finished: @Sendable (FinishedUpload) async -> Void) async {
        let (state, _) = read
        guard let info = state.info else { return }
        let upload = ObjectOffsetUpload(storage: self, meta: state.meta, info: info)
        upload.version.advance(to: read)
        do {
            guard try await upload.finish(), info.role != .partial else { return }
            await finished(
                FinishedUpload(
                    protocolName: state.meta.protocolName, id: state.meta.uploadId, path: upload.path.text, size: state.meta.size,
                    metadata: info.metadataText))
        } catch {
            logger.warning("An upload whose bytes are all in could not be completed; the next sweep tries again",
                           metadata: ["upload": "\(state.meta.uploadId)", "reason": "\(error)"])
        }
    }
}
