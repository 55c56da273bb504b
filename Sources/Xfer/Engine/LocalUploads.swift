/// A file of a local job that holds a handle naming an upload on the server
/// (say an S3 multipart upload's id): what `TransferEngine.localUploads`
/// finds, so that a listing of what the server holds can tell the uploads
/// a local job will continue from those nobody here knows of.
public struct LocalUpload: Sendable, Hashable {
    /// What the local job will do with the upload.
    public enum State: Sendable, Hashable {
        /// Resuming the job continues it (the job is unfinished, or failed).
        case resumable
        /// A live process runs the job now, sending into it.
        case running(pid: Int32)
        /// The file (or its whole job) is complete: the job needs the upload no more.
        case finished
        /// The job cannot be resumed (a stream whose push was killed or
        /// failed): the next push of the same stream, or cancelling the
        /// job, drops the upload.
        case notResumable
    }

    /// The job the file belongs to.
    public let job: JobID
    /// The file's position in the job.
    public let file: Int
    /// The file's local path.
    public let path: String
    /// The file's handles (the backend's, secrets included: not for display).
    public let handles: ServerHandles
    /// What the job will do with the upload.
    public let state: State
}

extension TransferEngine {
    /// The files of the local jobs pushed with the backend named `backend`
    /// that hold a value for `key`, by that value: for a listing of the
    /// server's uploads, "is this one a local job's?" in O(1) per row.
    ///
    /// Read once, in O(files of the jobs included); completed jobs still
    /// kept are included (their files `.finished`), cancelled jobs are gone
    /// from the store and so are not.
    ///
    /// - Parameter include: Which jobs to walk, by their target and
    ///   job-level handles (e.g. those that send to one bucket).
    public func localUploads(
        of backend: String, identifiedBy key: HandleKey,
        inJobs include: (_ target: String, _ handles: ServerHandles) -> Bool = { _, _ in true }
    ) throws(XferError) -> [String: LocalUpload] {
        var found: [String: LocalUpload] = [:]
        for listing in try store.listings() where listing.record.backend == backend {
            let record = listing.record
            guard include(record.target, record.handles) else { continue }
            let jobState = uploadState(of: record)
            var start = 0
            while true {
                let page = try store.files(job: record.id, from: start, limit: 4096)
                for (index, file) in page {
                    guard let value = file.handles[key], !value.isEmpty else { continue }
                    let state = jobState == .resumable && file.isComplete ? .finished : jobState
                    found[value] = LocalUpload(job: record.id, file: index, path: file.path, handles: file.handles, state: state)
                }
                guard let last = page.last else { break }
                start = last.index + 1
            }
        }
        return found
    }

    /// What job `record` will do with the uploads its files opened.
    private func uploadState(of record: JobRecord) -> LocalUpload.State {
        if let pid = JobLock.holder(stateDirectory: stateDirectory, job: record.id) { return .running(pid: pid) }
        if record.phase == .completed { return .finished }
        // A stream cannot be read again, so its job is never resumed.
        if record.isStream { return .notResumable }
        return .resumable
    }
}
