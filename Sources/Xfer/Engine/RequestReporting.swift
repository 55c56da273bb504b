import FoundationEssentials

extension HTTPTransport {
    /// Sends `request` as `send(_:counting:into:followingRedirects:)` does;
    /// with `events`, reports it afterwards as `.requestFinished` (the
    /// options asked for every request: `--verbose`). The body's size is the
    /// request's, or for a download's range the bytes written to its file.
    func send(
        _ request: HTTPRequest, counting counter: TransferByteCounter? = nil, into writer: RangeWriter? = nil,
        followingRedirects: Bool = false, reportingTo events: AsyncStream<TransferEvent>.Continuation?
    ) async throws(TransportError) -> HTTPResponse {
        guard let events else {
            return try await send(request, counting: counter, into: writer, followingRedirects: followingRedirects)
        }
        let start = ContinuousClock.now
        let outcome: Result<HTTPResponse, TransportError>
        do {
            outcome = .success(try await send(request, counting: counter, into: writer, followingRedirects: followingRedirects))
        } catch {
            outcome = .failure(error)
        }
        var status: Int?
        var failure: String?
        switch outcome {
        case .success(let response): status = response.status
        case .failure(let error): failure = error.description
        }
        events.yield(
            .requestFinished(
                RequestSummary(
                    method: request.method.rawValue, url: TransferEngine.displayURL(request.url), status: status,
                    failure: failure, bodyBytes: writer?.written ?? Int64(request.body.count), duration: .now - start)))
        return try outcome.get()
    }
}
