import HTTPTypes

// What `PUT /raw/{name}` answers (see `RawRoutes`).

/// 201's body.
struct RawAnswer: Encodable {
    var name: String
    var bytes: Int
}

extension Refusal {
    static func rawTooLarge(limit: Int) -> Refusal {
        .error(.contentTooLarge, "the body is larger than this receiver accepts (\(limit) bytes)")
    }
}
