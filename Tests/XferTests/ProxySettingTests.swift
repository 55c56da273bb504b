import Testing
@testable import Xfer

/// `TransportOptions.Proxy`: which proxy URLs are taken, and that a proxy's
/// credentials stay out of every description and error. Requests through a
/// real proxy are in the end-to-end ProxyTests.
@Suite struct ProxySettingTests {
    @Test(arguments: ["http", "https", "socks4", "socks4a", "socks5", "socks5h", "HTTP"])
    func everyProxySchemeCurlSpeaksIsTaken(scheme: String) throws {
        let url = "\(scheme)://proxy.example:3128"
        #expect(try TransportOptions.Proxy.checked(url) == .url(url))
    }

    @Test func otherURLsAreRefusedWithoutTheirPassword() {
        for url in ["ftp://user:hunter2@proxy.example:21", "proxy.example:3128", "user:hunter2@proxy.example", "http://user:hunter2@[bad", ""] {
            #expect(throws: TransportError.self, "\(url)") { _ = try TransportOptions.Proxy.checked(url) }
            do {
                _ = try TransportOptions.Proxy.checked(url)
            } catch {
                #expect(!error.description.contains("hunter2"), "\(error)")
            }
        }
    }

    @Test func descriptionsNameTheProxyWithoutItsCredentials() throws {
        let proxy = try TransportOptions.Proxy.checked("http://user:hunter2@Proxy.Example:3128/")
        #expect(proxy.description == "http://proxy.example:3128")
        #expect(String(reflecting: proxy) == "http://proxy.example:3128")
        var options = TransportOptions()
        options.proxy = proxy
        #expect(!"\(options)".contains("hunter2"))
        #expect(!String(reflecting: options).contains("hunter2"))
        // curl's defaults when the URL names no port.
        #expect(try TransportOptions.Proxy.checked("socks5h://proxy.example").description == "socks5h://proxy.example:1080")
        #expect(try TransportOptions.Proxy.checked("https://proxy.example").description == "https://proxy.example:443")
        #expect(TransportOptions.Proxy.none.description == "none")
    }

    @Test func curlMessagesLoseUserinfo() {
        #expect(CurlEasyHandle.withoutUserinfo("Unsupported proxy syntax in 'http://user:hunter2@[bad'")
            == "Unsupported proxy syntax in 'http://[bad'")
        #expect(CurlEasyHandle.withoutUserinfo("Unsupported proxy scheme for 'user:hunter2@host:3'") == "Unsupported proxy scheme for 'host:3'")
        #expect(CurlEasyHandle.withoutUserinfo("Failed to connect to 127.0.0.1 port 9") == "Failed to connect to 127.0.0.1 port 9")
    }

    @Test func theConnectionCurlTriedIsReadFromItsMessage() {
        let tried = CurlEasyHandle.connectionTried(in: "Failed to connect to Proxy.Example port 3128 after 0 ms: Couldn't connect to server")
        #expect(tried?.host == "proxy.example")
        #expect(tried?.port == 3128)
        #expect(CurlEasyHandle.connectionTried(in: "Could not resolve proxy: proxy.example") == nil)
    }
}
