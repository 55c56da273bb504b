import FoundationEssentials
import HTTPTypes
import Logging
import NIOCore
import NIOHTTPTypes
import NIOTLS
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How long a client may keep a connection waiting on what it must send, and how many
/// connections the receiver holds at once: what a client that sends slowly, or not at all, can
/// cost it. `ReceiverConfiguration` documents each.
struct ConnectionRules: Sendable {
    var requestHeadTimeout: Duration
    var idleTimeout: Duration
    var bodyStallTimeout: Duration
    /// Nil without TLS.
    var tlsHandshakeTimeout: Duration?
}

/// Closes a connection whose client keeps it waiting too long, whatever the phase it is in:
///
/// - its TLS handshake not done within `tlsHandshakeTimeout` of the connection;
/// - its first request's head not complete within `requestHeadTimeout` of the connection (or of
///   the handshake) — half a head never reaches a route, so nothing else would ever notice it;
/// - after an answer, no next request's head within `idleTimeout` (a keep-alive connection left
///   open, or one whose next head trickles in);
/// - a request body of which no byte arrived for `bodyStallTimeout` while the receiver was
///   reading it: the connection is closed, so the request's handler sees its body fail, and the
///   storage keeps what it keeps of a cut body;
/// - an answer of which the client took no byte for `bodyStallTimeout` (the connection stayed
///   unwritable: a download nobody reads holds its file and its connection otherwise for ever).
///
/// Nothing is timed while a request's answer is being worked out, nor while the receiver itself
/// is not reading the body (its handler busy or waiting, or NIO's backpressure holding reads):
/// the body clock runs only between a read the receiver asked for and the bytes that answer it,
/// so a client is never cut for the receiver's own slowness.
///
/// Hummingbird's `idleTimeout` (`HTTP1Channel.Configuration`) is not used: it is one clock for all
/// of these phases, and it counts a body the receiver is not reading (a handler waiting for an
/// upload's turn, backpressure) as a stalled client.
///
/// It also tells the receiver's `ConnectionLimit` whether the connection is idle (it has no
/// request under way: the one to give way when a new connection comes at the limit) or busy.
///
/// Sits after the HTTP codec (`HTTP1Channel`'s additional handlers): it sees request heads,
/// body parts and ends, answers' ends, and the reads the pipeline asks for.
final class ConnectionDeadlines: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let rules: ConnectionRules
    private let limit: ConnectionLimit
    private let logger: Logger
    /// The connection's place in `limit`; nil before admission, once closed, or when refused.
    private var slot: Int?
    private var started = false
    private var handshaking: Bool
    /// Whether a request was answered on this connection: the wait for a head is then the idle one.
    private var answeredAny = false
    /// Requests whose head arrived and whose answer has not ended.
    private var requestsInProgress = 0
    private var readingBody = false
    /// When the present wait for a handshake, a first head or a next one began.
    private var since = NIODeadline.now()
    /// Since when a read the pipeline asked for has gone unanswered; nil when none is pending.
    private var waitingForBytesSince: NIODeadline?
    /// Since when the connection has taken none of the answer's bytes (unwritable); nil while it can.
    private var unwritableSince: NIODeadline?
    private var timer: Scheduled<Void>?
    private var timerDeadline: NIODeadline?

    init(rules: ConnectionRules, limit: ConnectionLimit, logger: Logger) {
        self.rules = rules
        self.limit = limit
        self.logger = logger
        handshaking = rules.tlsHandshakeTimeout != nil
    }

    private enum Wait: String {
        case tlsHandshake = "TLS handshake not done"
        case firstHead = "no complete request head"
        case idle = "idle"
        case body = "request body stalled"
        case answer = "answer not read"
    }

    /// When the connection is to be closed if nothing happens meanwhile, and why; nil while the
    /// receiver, not the client, is the one to act.
    private var deadline: (at: NIODeadline, wait: Wait)? {
        let answer = unwritableSince.map { ($0 + TimeAmount(rules.bodyStallTimeout), Wait.answer) }
        guard let phase = phaseDeadline else { return answer }
        guard let answer else { return phase }
        return answer.0 < phase.at ? answer : phase
    }

    private var phaseDeadline: (at: NIODeadline, wait: Wait)? {
        if handshaking, let timeout = rules.tlsHandshakeTimeout { return (since + TimeAmount(timeout), .tlsHandshake) }
        if readingBody { return waitingForBytesSince.map { ($0 + TimeAmount(rules.bodyStallTimeout), .body) } }
        if requestsInProgress > 0 { return nil }
        return answeredAny ? (since + TimeAmount(rules.idleTimeout), .idle) : (since + TimeAmount(rules.requestHeadTimeout), .firstHead)
    }

    // MARK: Life

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        // Passed on first: a connection refused here is closed after the pipeline saw it active.
        context.fireChannelActive()
        start(context)
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        since = .now()
        guard let admitted = limit.admit(context.channel) else {
            logger.debug("Refusing a connection: every one of the maximum is busy", metadata: ["maximum": "\(limit.maximum)"])
            context.close(promise: nil)
            return
        }
        slot = admitted
        schedule(context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    private func stop() {
        timer?.cancel()
        timer = nil
        timerDeadline = nil
        if let slot { limit.closed(slot) }
        slot = nil
    }

    // MARK: What passes

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if handshaking, case .handshakeCompleted? = event as? TLSUserEvent {
            handshaking = false
            since = .now()
            schedule(context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            requestsInProgress += 1
            readingBody = true
            waitingForBytesSince = nil
            if requestsInProgress == 1, let slot { limit.busy(slot) }
        case .body:
            waitingForBytesSince = nil
        case .end:
            readingBody = false
            waitingForBytesSince = nil
            // An answer sent before its body was read (a refusal) leaves the connection idle only now.
            if requestsInProgress == 0 { becomeIdle(context) }
        }
        context.fireChannelRead(data)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            unwritableSince = nil
        } else if unwritableSince == nil {
            unwritableSince = .now()
            schedule(context)
        }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if waitingForBytesSince == nil {
            waitingForBytesSince = .now()
            if readingBody { schedule(context) }
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            // Never below 0: Hummingbird answers a head it could not parse (400) without one read.
            requestsInProgress = max(0, requestsInProgress - 1)
            if requestsInProgress == 0, !readingBody { becomeIdle(context) }
        }
        context.write(data, promise: promise)
    }

    private func becomeIdle(_ context: ChannelHandlerContext) {
        answeredAny = true
        since = .now()
        if let slot { limit.idle(slot) }
        schedule(context)
    }

    // MARK: The clock

    /// Makes the timer fire by the current deadline. One timer per connection, never rescheduled
    /// for a later deadline: it re-reads the deadline when it fires (a body's bytes only ever
    /// push it later), so a busy body costs a clock read per read, not a timer per buffer.
    private func schedule(_ context: ChannelHandlerContext) {
        guard slot != nil, let (at, _) = deadline else { return }
        if let timerDeadline, timerDeadline <= at { return }
        timer?.cancel()
        timerDeadline = at
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: at) {
            let (handler, context) = loopBound.value
            handler.timerFired(context)
        }
    }

    private func timerFired(_ context: ChannelHandlerContext) {
        timer = nil
        timerDeadline = nil
        guard slot != nil, let (at, wait) = deadline else { return }
        guard at <= .now() else {
            schedule(context)
            return
        }
        logger.debug("Closing a connection", metadata: ["reason": "\(wait.rawValue)"])
        context.close(promise: nil)
    }
}

/// The connections a receiver holds, at most `maximum`, so that descriptors and memory stay
/// bounded however many a client opens.
///
/// At the maximum, a new connection is accepted and the connection that has been idle the longest
/// — no request under way: one that has not finished sending a head (half-open), or a keep-alive
/// one between requests — is closed to make room. Only when every held connection is busy with a
/// request is the new one closed at once. So a flood of connections that send nothing, or half a
/// head, cannot lock anyone out: each new one (a load balancer's `/health` probe, a client's
/// request) pushes out the oldest silent one, and its own head arrives long before it would be
/// the oldest. Not accepting at the maximum instead (Hummingbird's `MaximumAvailableConnections`)
/// leaves new connections in the kernel's accept queue behind the flood until a held one times
/// out, and a probe waits as long.
final class ConnectionLimit: Sendable {
    let maximum: Int
    private let state = Mutex(State())

    init(maximum: Int) {
        precondition(maximum >= 1, "at least one connection")
        self.maximum = maximum
    }

    /// Room for connections the process's descriptor limit leaves: each connection holds its
    /// socket and, while it writes an upload, a file; the rest (stores, hooks, syncs, logs) gets a
    /// reserve. At most 4,096: each held connection also costs the receiver ~22 KiB resident (its
    /// pipeline, its task, the read buffer a half-sent head sits in), ~90 MiB at 4,096.
    static func defaultMaximum() -> Int {
        max(16, min(4_096, (descriptorLimit - reservedDescriptors) / 2))
    }

    /// Descriptors kept for what is not a connection.
    static let reservedDescriptors = 256

    /// The largest `maximum` the descriptor limit allows at all: one descriptor per connection.
    static func largestMaximum() -> Int {
        max(16, descriptorLimit - reservedDescriptors)
    }

    /// The process's soft limit on open descriptors (1,024 when it cannot be read; "unlimited"
    /// as a million).
    private static var descriptorLimit: Int {
        var limits = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 1024 }
        return limits.rlim_cur == rlim_t.max ? 1 << 20 : Int(clamping: limits.rlim_cur)
    }

    /// Counts `channel`, idle (it has sent nothing yet), closing the longest idle connection when
    /// at the maximum; nil when every held connection is busy: then close `channel`.
    func admit(_ channel: any Channel) -> Int? {
        let (admitted, evicted) = state.withLock { state -> (Int?, (any Channel)?) in
            var evicted: (any Channel)?
            if state.open.count >= maximum {
                guard let oldest = state.takeLongestIdle() else { return (nil, nil) }
                evicted = state.open.removeValue(forKey: oldest)?.channel
            }
            let id = state.nextID
            state.nextID += 1
            state.open[id] = Entry(channel: channel)
            state.markIdle(id)
            return (id, evicted)
        }
        evicted?.close(promise: nil)
        return admitted
    }

    /// A request is under way on connection `id`: it is not to give way.
    func busy(_ id: Int) {
        state.withLock { $0.open[id]?.idleSince = nil }
    }

    /// Connection `id` has no request under way.
    func idle(_ id: Int) {
        state.withLock { $0.markIdle(id) }
    }

    func closed(_ id: Int) {
        state.withLock { state in
            state.open[id] = nil
            state.compactIfStale()
        }
    }

    /// Connections held now.
    var count: Int { state.withLock { $0.open.count } }

    private struct Entry {
        let channel: any Channel
        /// The turn it became idle in; nil while busy.
        var idleSince: Int?
    }

    private struct State {
        var nextID = 0
        var nextTurn = 0
        var open: [Int: Entry] = [:]
        /// Connections in the order they became idle, oldest first from `head`; an entry whose
        /// turn is no longer its connection's (busy since, or idle again later, or closed) is stale.
        var idleOrder: [(id: Int, turn: Int)] = []
        var head = 0

        mutating func markIdle(_ id: Int) {
            guard open[id] != nil else { return }
            open[id]!.idleSince = nextTurn
            idleOrder.append((id, nextTurn))
            nextTurn += 1
            compactIfStale()
        }

        mutating func takeLongestIdle() -> Int? {
            while head < idleOrder.count {
                let (id, turn) = idleOrder[head]
                head += 1
                if open[id]?.idleSince == turn { return id }
            }
            return nil
        }

        /// Keeps `idleOrder` within a constant factor of the connections held: every request
        /// appends to it, and it is read only at the maximum.
        mutating func compactIfStale() {
            guard idleOrder.count - head > 2 * open.count + 64 else { return }
            let current = open
            idleOrder = idleOrder[head...].filter { current[$0.id]?.idleSince == $0.turn }
            head = 0
        }
    }
}
