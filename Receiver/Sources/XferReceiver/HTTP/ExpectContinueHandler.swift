import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue`, which Hummingbird 2 leaves unanswered: curl and other clients
/// then sit out their expect timeout (1 s for curl) before every body.
///
/// The 100 goes out as soon as the request head arrives. Routes that refuse a request before
/// reading its body still work: the client sends the body, and Hummingbird drains it after the
/// final response. A request pipelined behind an unfinished response gets its 100 only once that
/// response has ended, so a 100 never lands in the middle of another response.
final class ExpectContinueHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// One entry per request still awaiting its final response: does it still need a 100?
    private var awaitingResponse: [Bool] = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let request) = unwrapInboundIn(data) {
            let expectsContinue = request.headerFields[.expect]?.lowercased() == "100-continue"
            awaitingResponse.append(expectsContinue)
            if awaitingResponse.count == 1 && expectsContinue {
                sendContinue(context: context)
            }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let isEnd: Bool
        if case .end = unwrapOutboundIn(data) { isEnd = true } else { isEnd = false }
        context.write(data, promise: promise)
        guard isEnd, !awaitingResponse.isEmpty else { return }
        awaitingResponse.removeFirst()
        if awaitingResponse.first == true {
            sendContinue(context: context)
        }
    }

    private func sendContinue(context: ChannelHandlerContext) {
        awaitingResponse[0] = false
        context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
    }
}
