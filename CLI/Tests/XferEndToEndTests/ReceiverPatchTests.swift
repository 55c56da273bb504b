import Crypto
import Foundation
import Testing
import XferReceiver
import XferReceiverTesting
import Xfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The handle a receiver on `root` hands out for upload `id`, for uploads a test planted.
private func handle(of id: String, root: String) throws -> String {
    uploadHandle(of: id, key: try Data(contentsOf: URL(fileURLWithPath: root + "/" + uploadHandleKeyName)))
}

/// Drives the reference receiver's `patch` protocol over real HTTP (curl), in-process.
@Suite("Receiver: patch protocol")
struct ReceiverPatchTests {
    @Test("create, chunks out of order and one twice, status, complete, download, complete again")
    func fullUpload() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(350_000, seed: 1)
            let created = try await client.create(fileName: "report.bin", size: data.count, chunkSize: 100_000)
            #expect(created.reply.status == 201)
            #expect(created.answer.chunkSize == 100_000)
            #expect(created.reply.headers["location"] == server.baseURL + "/uploads/" + created.answer.uploadId)
            let id = created.answer.uploadId

            for chunk in [3, 1, 1, 4] {
                let reply = try await client.patch(id: id, chunk: chunk, of: data, chunkSize: 100_000)
                #expect(reply.status == 204, "chunk \(chunk): \(reply.text)")
            }
            #expect(try await client.status(id: id).received == [1, 3, 4])
            #expect(try await client.patch(id: id, chunk: 2, of: data, chunkSize: 100_000).status == 204)

            let status = try await client.status(id: id)
            #expect(status.received == [1, 2, 3, 4])
            #expect(status.size == data.count && status.chunkSize == 100_000 && status.uploadId == id)

            let completed = try await client.complete(id: id)
            #expect(completed.reply.status == 200)
            let answer = try #require(completed.answer)
            #expect(answer.sha256 == sha256Hex(data))
            #expect(answer.url == server.baseURL + "/downloads/\(storedID(id))/report.bin")

            let download = try await curl("GET", answer.url)
            #expect(download.status == 200)
            #expect(download.body == data)
            #expect(download.headers["content-type"] == "application/octet-stream")
            #expect(download.headers["content-length"] == String(data.count))
            let head = try await curl("HEAD", answer.url)
            #expect(head.status == 200)
            #expect(head.headers["content-length"] == String(data.count))

            // A client killed after the server completed calls complete again and must get the same answer.
            let again = try await client.complete(id: id)
            #expect(again.reply.status == 200)
            #expect(again.answer?.sha256 == answer.sha256 && again.answer?.url == answer.url)
            // ...and can still reconcile first.
            #expect(try await client.status(id: id).received == [1, 2, 3, 4])
            // The data file moved: late chunks are refused, not written into the void.
            #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 100_000).status == 409)
        }
    }

    @Test("concurrent chunks of one upload")
    func concurrentChunks() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let chunkSize = 64 * 1024
            let data = testBytes(chunkSize * 8 - 1000, seed: 2)
            let id = try await client.create(fileName: "parallel.bin", size: data.count, chunkSize: chunkSize).answer.uploadId
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                // Chunk 1 twice at once: the second waits for the first instead of interleaving its writes.
                for chunk in [1] + Array(1...8) {
                    group.addTask { try await client.patch(id: id, chunk: chunk, of: data, chunkSize: chunkSize).status }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 204, count: 9))
            let answer = try #require(try await client.complete(id: id).answer)
            #expect(answer.sha256 == sha256Hex(data))
            #expect(try await curl("GET", answer.url).body == data)
        }
    }

    @Test("complete with a missing chunk answers 409 with the missing list")
    func completeWithMissingChunks() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(250, seed: 3)
            let id = try await client.create(fileName: "a.bin", size: data.count, chunkSize: 50).answer.uploadId
            for chunk in [1, 3, 5] {
                #expect(try await client.patch(id: id, chunk: chunk, of: data, chunkSize: 50).status == 204)
            }
            let reply = try await client.complete(id: id)
            #expect(reply.reply.status == 409)
            #expect(try reply.reply.decode(MissingBody.self).missing == [2, 4])
        }
    }

    @Test("a bad MD5 is refused and unmarks a chunk received earlier")
    func badDigestUnmarksChunk() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(300, seed: 4)
            let id = try await client.create(fileName: "b.bin", size: data.count, chunkSize: 100).answer.uploadId
            for chunk in 1...3 {
                #expect(try await client.patch(id: id, chunk: chunk, of: data, chunkSize: 100).status == 204)
            }
            #expect(try await client.status(id: id).received == [1, 2, 3])

            // Different bytes, declared with the MD5 of the right ones: they land on disk, then fail.
            let wrongBytes = testBytes(100, seed: 99)
            let bad = try await client.patchRaw(
                id: id, chunk: 2, body: wrongBytes, range: "bytes 100-199/300", md5: md5Base64(data[100..<200]))
            // 422: damaged on the way, so the client sends the chunk again.
            #expect(bad.status == 422)
            #expect(try bad.decode(ErrorBody.self).error.contains("does not match its digest"))
            #expect(try await client.status(id: id).received == [1, 3])
            #expect(try await client.complete(id: id).reply.decode(MissingBody.self).missing == [2])

            // A malformed digest header is refused before anything is written.
            let malformed = try await client.patchRaw(id: id, chunk: 1, body: data[0..<100], range: "bytes 0-99/300", md5: "not-base64")
            #expect(malformed.status == 400)
            #expect(try await client.status(id: id).received == [1, 3])

            // Resending the right bytes repairs it.
            #expect(try await client.patch(id: id, chunk: 2, of: data, chunkSize: 100).status == 204)
            #expect(try await client.complete(id: id).answer?.sha256 == sha256Hex(data))
        }
    }

    @Test("wrong ranges, sizes and chunk numbers are refused")
    func wrongRanges() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(250, seed: 5)
            let id = try await client.create(fileName: "c.bin", size: data.count, chunkSize: 100).answer.uploadId
            let first = data[0..<100]

            // Chunk 2's range on chunk 1, wrong total, missing header, unknown chunk numbers.
            #expect(try await client.patchRaw(id: id, chunk: 1, body: first, range: "bytes 100-199/250").status == 400)
            #expect(try await client.patchRaw(id: id, chunk: 1, body: first, range: "bytes 0-99/251").status == 400)
            #expect(try await client.patchRaw(id: id, chunk: 1, body: first, range: nil).status == 400)
            #expect(try await client.patchRaw(id: id, chunk: 0, body: first, range: "bytes 0-99/250").status == 400)
            #expect(try await client.patchRaw(id: id, chunk: 4, body: first, range: "bytes 300-399/250").status == 400)
            // Last chunk is short (50 bytes): a full-size range is wrong.
            #expect(try await client.patchRaw(id: id, chunk: 3, body: data[200..<250], range: "bytes 200-299/250").status == 400)
            // Body shorter than the range, and body longer than the chunk.
            #expect(try await client.patchRaw(id: id, chunk: 1, body: data[0..<99], range: "bytes 0-99/250").status == 400)
            #expect(try await client.patchRaw(id: id, chunk: 1, body: data[0..<101], range: "bytes 0-99/250").status == 413)
            // Same oversized body without a Content-Length (chunked transfer): caught while streaming.
            let chunked = try await client.patchRaw(
                id: id, chunk: 1, body: data[0..<150], range: "bytes 0-99/250", extraHeaders: ["Transfer-Encoding: chunked"])
            #expect(chunked.status == 413)

            #expect(try await client.status(id: id).received == [])
            #expect(try await client.patch(id: id, chunk: 3, of: data, chunkSize: 100).status == 204)
            #expect(try await client.status(id: id).received == [3])
        }
    }

    @Test("unknown uploads, malformed ids and unknown routes answer 404")
    func unknownUploads() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let unknown = String(repeating: "ab", count: 16)
            let status = try await curl("GET", server.baseURL + "/uploads/" + unknown)
            #expect(status.status == 404)
            #expect(try status.decode(ErrorBody.self).error.isEmpty == false)
            #expect(try await client.patchRaw(id: unknown, chunk: 1, body: Data([1]), range: "bytes 0-0/1").status == 404)
            #expect(try await curl("POST", server.baseURL + "/uploads/\(unknown)/complete").status == 404)
            #expect(try await curl("DELETE", server.baseURL + "/uploads/" + unknown).status == 404)
            #expect(try await curl("GET", server.baseURL + "/uploads/..%2F..%2Fetc").status == 404)
            #expect(try await curl("GET", server.baseURL + "/uploads/" + unknown.uppercased()).status == 404)
            #expect(try await curl("GET", server.baseURL + "/downloads/\(unknown)/x.bin").status == 404)
            let unknownRoute = try await curl("GET", server.baseURL + "/nothing/here")
            #expect(unknownRoute.status == 404)
            #expect(try unknownRoute.decode(ErrorBody.self).error.isEmpty == false)
            #expect(try await curl("PUT", server.baseURL + "/uploads").status == 404)
            #expect(try await curl("GET", server.baseURL + "/files/x").status == 404)
        }
    }

    @Test("creation is validated")
    func createValidation() async throws {
        try await withReceiver(configure: { $0.maximumChunkSize = 1 << 20 }) { server in
            let client = PatchTestClient(base: server.baseURL)
            #expect(try await client.create(fileName: "x", size: -1, chunkSize: 10).reply.status == 400)
            #expect(try await client.create(fileName: "x", size: 10, chunkSize: 0).reply.status == 400)
            #expect(try await client.create(fileName: "x", size: 10, chunkSize: (1 << 20) + 1).reply.status == 400)
            #expect(try await client.create(fileName: "", size: 10, chunkSize: 10).reply.status == 400)
            #expect(try await client.create(fileName: "dir/..", size: 10, chunkSize: 10).reply.status == 400)
            let garbage = try await curl(
                "POST", server.baseURL + "/uploads", headers: ["Content-Type: application/json"], body: Data("{\"fileName\":1}".utf8))
            #expect(garbage.status == 400)
            #expect(try garbage.decode(ErrorBody.self).error.contains("fileName"))
        }
    }

    @Test("creation bodies are read as JSONDecoder reads them (escapes, spacing, extra members)")
    func createBodies() async throws {
        try await withReceiver { server in
            func create(_ json: String) async throws -> HTTPReply {
                try await curl("POST", server.baseURL + "/uploads", headers: ["Content-Type: application/json"], body: Data(json.utf8))
            }
            let accepted: [(String, String)] = [
                (#"{"fileName":"a\u00e9\ud83d\ude00\/b \"q\".bin","size":1,"chunkSize":1}"#, "a\u{e9}\u{1F600}/b \"q\".bin"),
                (" {\n \"size\" : 1 ,\t\"chunkSize\":1, \"fileName\" : \"c.bin\" } \n", "c.bin"),
                (#"{"fileName":"d.bin","size":1,"chunkSize":1,"extra":{"nested":[1,2.5,true,null]}}"#, "d.bin"),
                (#"{"fileName":"e.bin","size":1.0,"chunkSize":1}"#, "e.bin"),
            ]
            for (json, name) in accepted {
                let reply = try await create(json)
                #expect(reply.status == 201, "\(json): \(reply.text)")
                guard reply.status == 201 else { continue }
                let id = try reply.decode(CreateBody.self).uploadId
                #expect(try await PatchTestClient(base: server.baseURL).status(id: id).fileName == name)
            }
            for json in [
                #"{"fileName":"f.bin","size":1,"chunkSize":1"#, #"{"fileName":"g.bin","size":"1","chunkSize":1}"#,
                #"{"fileName":"h\ud800.bin","size":1,"chunkSize":1}"#, #"{"fileName":"i.bin","size":1e400,"chunkSize":1}"#,
                #"{"fileName":"j.bin","size":99999999999999999999,"chunkSize":1}"#, "[]", "",
            ] {
                #expect(try await create(json).status == 400, "\(json)")
            }
        }
    }

    @Test("the server's chunk size wins when forced")
    func forcedChunkSize() async throws {
        var switches = ReceiverTestSwitches()
        switches.patchChunkSize = 40
        try await withReceiver(testing: switches) { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(100, seed: 6)
            let created = try await client.create(fileName: "d.bin", size: data.count, chunkSize: 1000)
            #expect(created.reply.status == 201)
            #expect(created.answer.chunkSize == 40)
            let id = created.answer.uploadId
            #expect(try await client.status(id: id).chunkSize == 40)
            // The client's own chunk size no longer fits.
            #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 100).status == 400)
            for chunk in 1...3 {
                #expect(try await client.patch(id: id, chunk: chunk, of: data, chunkSize: 40).status == 204)
            }
            #expect(try await client.complete(id: id).answer?.sha256 == sha256Hex(data))
        }
    }

    @Test("a restarted receiver keeps received chunks and completed files")
    func restartKeepsState() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let partial = testBytes(300, seed: 7)
        let whole = testBytes(1000, seed: 8)
        let partialID: String
        let wholeID: String
        let firstAnswer: CompleteBody

        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            partialID = try await client.create(fileName: "partial.bin", size: partial.count, chunkSize: 100).answer.uploadId
            #expect(try await client.patch(id: partialID, chunk: 1, of: partial, chunkSize: 100).status == 204)
            #expect(try await client.patch(id: partialID, chunk: 3, of: partial, chunkSize: 100).status == 204)
            wholeID = try await client.create(fileName: "whole.bin", size: whole.count, chunkSize: 600).answer.uploadId
            #expect(try await client.patch(id: wholeID, chunk: 2, of: whole, chunkSize: 600).status == 204)
            #expect(try await client.patch(id: wholeID, chunk: 1, of: whole, chunkSize: 600).status == 204)
            firstAnswer = try #require(try await client.complete(id: wholeID).answer)
            try await server.stop()
        }

        // A torn record (as a crash mid-append leaves) must count for nothing, and must not swallow later records.
        let log = root + "/uploads/\(storedID(partialID)).log"
        let handle = try #require(FileHandle(forWritingAtPath: log))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("\n+2".utf8))
        try handle.close()

        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            #expect(try await client.status(id: partialID).received == [1, 3])

            let again = try #require(try await client.complete(id: wholeID).answer)
            #expect(again.sha256 == firstAnswer.sha256)
            #expect(again.url == server.baseURL + "/downloads/\(storedID(wholeID))/whole.bin")
            #expect(try await curl("GET", again.url).body == whole)
            #expect(try await client.status(id: wholeID).received == [1, 2])

            #expect(try await client.patch(id: partialID, chunk: 2, of: partial, chunkSize: 100).status == 204)
            try await server.stop()
        }

        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            #expect(try await client.status(id: partialID).received == [1, 2, 3])
            #expect(try await client.complete(id: partialID).answer?.sha256 == sha256Hex(partial))
            try await server.stop()
        }
    }

    @Test("a single small chunk is recorded with its digest; bytes a crash lost make it missing again")
    func singleChunkDigestRecord() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = testBytes(4096, seed: 21)
        var ids: [String] = []
        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            for name in ["kept.bin", "lost.bin", "short.bin"] {
                let id = try await client.create(fileName: name, size: data.count, chunkSize: 8192).answer.uploadId
                #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 8192).status == 204)
                ids.append(id)
            }
            try await server.stop()
        }
        let log = try String(contentsOfFile: root + "/uploads/\(storedID(ids[0])).log", encoding: .utf8)
        #expect(log.hasSuffix("\n+1." + sha256Hex(data) + ";"), "\(log)")
        // As if a crash during the chunk's sync round kept the record but not (all of) the bytes.
        try Data(repeating: 0, count: 4096).write(to: URL(fileURLWithPath: root + "/uploads/\(storedID(ids[1])).data"))
        try Data(data.prefix(100)).write(to: URL(fileURLWithPath: root + "/uploads/\(storedID(ids[2])).data"))

        let server = try await RunningReceiver.start(root: root)
        let client = PatchTestClient(base: server.baseURL)
        #expect(try await client.status(id: ids[0]).received == [1])
        #expect(try await client.complete(id: ids[0]).answer?.sha256 == sha256Hex(data))
        for id in ids[1...] {
            #expect(try await client.status(id: id).received == [])
            #expect(try await curl("POST", server.baseURL + "/uploads/\(id)/complete").status == 409)
            #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 8192).status == 204)
            let answer = try #require(try await client.complete(id: id).answer)
            #expect(answer.sha256 == sha256Hex(data))
            #expect(try await curl("GET", answer.url).body == data)
        }
        try await server.stop()
    }

    @Test("uploads a receiver of layout 1 left (meta.json, received.log, complete.json) resume and complete")
    func layoutOneUploads() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = testBytes(300, seed: 13)
        let pending = String(repeating: "1", count: 32), done = String(repeating: "2", count: 32)
        // As the previous receiver wrote them: a pending upload holding chunks 1 and 3 of 3, and a
        // completed one whose file is published.
        func writeUpload(_ id: String, name: String, records: String, completed: Bool) throws {
            let directory = root + "/uploads/" + id
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let meta = "{\"chunkSize\":100,\"fileName\":\"\(name)\",\"formatVersion\":1,\"protocolName\":\"patch\",\"size\":300,\"uploadId\":\"\(id)\"}"
            try Data(meta.utf8).write(to: URL(fileURLWithPath: directory + "/meta.json"))
            try Data(records.utf8).write(to: URL(fileURLWithPath: directory + "/received.log"))
            var bytes = data
            if !completed { bytes.replaceSubrange(100..<200, with: Data(repeating: 0, count: 100)) }
            if completed {
                try FileManager.default.createDirectory(atPath: root + "/downloads/" + id, withIntermediateDirectories: true)
                try bytes.write(to: URL(fileURLWithPath: root + "/downloads/\(id)/\(name)"))
                let record = "{\"sha256\":\"\(sha256Hex(data))\",\"size\":300}"
                try Data(record.utf8).write(to: URL(fileURLWithPath: directory + "/complete.json"))
            } else {
                try bytes.write(to: URL(fileURLWithPath: directory + "/data"))
            }
        }
        try writeUpload(pending, name: "old.bin", records: "\n+1;\n+3;", completed: false)
        try writeUpload(done, name: "done.bin", records: "\n+1;\n+2;\n+3;", completed: true)

        let server = try await RunningReceiver.start(root: root)
        let client = PatchTestClient(base: server.baseURL)
        // Their clients know them by the handles a receiver of today hands out.
        let (pendingHandle, doneHandle) = (try handle(of: pending, root: root), try handle(of: done, root: root))
        #expect(try await client.status(id: pendingHandle).received == [1, 3])
        #expect(try await client.patch(id: pendingHandle, chunk: 2, of: data, chunkSize: 100).status == 204)
        let answer = try #require(try await client.complete(id: pendingHandle).answer)
        #expect(answer.sha256 == sha256Hex(data))
        #expect(try await curl("GET", answer.url).body == data)
        #expect(try String(contentsOfFile: root + "/uploads/\(pending)/received.log", encoding: .utf8).hasSuffix("\n+2;"))
        #expect(FileManager.default.fileExists(atPath: root + "/uploads/\(pending)/complete.json"))
        let again = try #require(try await client.complete(id: doneHandle).answer)
        #expect(again.url == server.baseURL + "/downloads/\(done)/done.bin")
        #expect(try await curl("GET", again.url).body == data)
        try await server.stop()
    }

    @Test("a completion a crash cut short is finished when the upload is loaded again")
    func completionRecovery() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = testBytes(500, seed: 14)
        var ids: [String] = []
        var answers: [CompleteBody] = []
        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            for name in ["a/recorded.bin", "b/published.bin"] {
                let id = try await client.create(fileName: name, size: data.count, chunkSize: 300).answer.uploadId
                for chunk in 1...2 { #expect(try await client.patch(id: id, chunk: chunk, of: data, chunkSize: 300).status == 204) }
                answers.append(try #require(try await client.complete(id: id).answer))
                ids.append(id)
            }
            try await server.stop()
        }
        // The first as if the crash kept the record but not the rename; the second as if it
        // kept the rename but not the record.
        let stored = ids.map(storedID)
        try FileManager.default.moveItem(atPath: root + "/downloads/\(stored[0])/a/recorded.bin", toPath: root + "/uploads/\(stored[0]).data")
        try FileManager.default.removeItem(atPath: root + "/downloads/\(stored[0])")
        let log = root + "/uploads/\(stored[1]).log"
        let text = try String(contentsOfFile: log, encoding: .utf8)
        let withoutRecord = try #require(text.range(of: "\n=")).lowerBound
        try Data(text[..<withoutRecord].utf8).write(to: URL(fileURLWithPath: log))

        let server = try await RunningReceiver.start(root: root)
        let client = PatchTestClient(base: server.baseURL)
        for (id, answer) in zip(ids, answers) {
            let again = try #require(try await client.complete(id: id).answer)
            // The restarted receiver listens on another port: the same path.
            #expect(again.sha256 == answer.sha256 && URL(string: again.url)?.path == URL(string: answer.url)?.path)
            #expect(try await curl("GET", again.url).body == data)
        }
        // The record holds the file's SHA-256, size and CRC-32C (read back by the recovery too).
        let crc32c = try #require(answers[1].crc32c)
        #expect(crc32c == CRC32.hex(CRC32C.of(Array(data))))
        let sha256 = try #require(answers[1].sha256, "chunks sent with Content-MD5: the file is read back")
        let expectedRecord = "\n=" + sha256 + ".500." + crc32c + ";"
        #expect(try String(contentsOfFile: log, encoding: .utf8).contains(expectedRecord))
        #expect(!FileManager.default.fileExists(atPath: root + "/uploads/\(stored[0]).data"))
        try await server.stop()
    }

    @Test("a creation a crash cut short is unknown, and a delete leaves no file of the upload")
    func tornCreationAndDelete() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/uploads", withIntermediateDirectories: true)
        let torn = String(repeating: "3", count: 32), noData = String(repeating: "4", count: 32)
        try Data("{\"chunkSize\":10,\"fileNa".utf8).write(to: URL(fileURLWithPath: root + "/uploads/\(torn).log"))
        let meta = "{\"chunkSize\":10,\"fileName\":\"x\",\"formatVersion\":1,\"protocolName\":\"patch\",\"size\":10,\"uploadId\":\"\(noData)\"}"
        try Data(meta.utf8).write(to: URL(fileURLWithPath: root + "/uploads/\(noData).log"))

        let server = try await RunningReceiver.start(root: root)
        let client = PatchTestClient(base: server.baseURL)
        for id in [torn, noData] {
            #expect(try await curl("GET", server.baseURL + "/uploads/" + (try handle(of: id, root: root))).status == 404)
        }
        let data = testBytes(10, seed: 15)
        let id = try await client.create(fileName: "gone.bin", size: 10, chunkSize: 10).answer.uploadId
        #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 10).status == 204)
        #expect(try await curl("DELETE", server.baseURL + "/uploads/" + id).status == 204)
        let left = try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").filter { $0.hasPrefix(storedID(id)) }
        #expect(left.isEmpty, "\(left)")
        #expect(try await curl("GET", server.baseURL + "/uploads/" + id).status == 404)
        try await server.stop()
    }

    @Test("non-ASCII and path-like file names")
    func fileNames() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(10, seed: 9)
            let id = try await client.create(fileName: "视频 01.mp4", size: data.count, chunkSize: 10).answer.uploadId
            #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 10).status == 204)
            let answer = try #require(try await client.complete(id: id).answer)
            #expect(answer.url == server.baseURL + "/downloads/\(storedID(id))/%E8%A7%86%E9%A2%91%2001.mp4")
            #expect(try await curl("GET", answer.url).body == data)
            #expect(FileManager.default.fileExists(atPath: server.root + "/downloads/\(storedID(id))/视频 01.mp4"))
            #expect(try await client.status(id: id).fileName == "视频 01.mp4")

            // A path that climbs is refused (it used to be cut to its last component; names are
            // relative paths now, see ReceiverTreeTests).
            let sneaky = try await client.create(fileName: "../../etc/passwd", size: 1, chunkSize: 1)
            #expect(sneaky.reply.status == 400)
            #expect(try sneaky.reply.decode(ErrorBody.self).error.contains("'..'"))
            // A Windows path without '/' is still cut to what follows its last '\', as before.
            let windows = try await client.create(fileName: "C:\\Users\\me\\notes.txt", size: 1, chunkSize: 1).answer.uploadId
            #expect(try await client.patch(id: windows, chunk: 1, of: Data([7]), chunkSize: 1).status == 204)
            #expect(try await client.complete(id: windows).answer?.url == server.baseURL + "/downloads/\(storedID(windows))/notes.txt")
            #expect(FileManager.default.fileExists(atPath: server.root + "/downloads/\(storedID(windows))/notes.txt"))
        }
    }

    @Test("a zero-byte file has no chunks and completes")
    func zeroByteUpload() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let id = try await client.create(fileName: "empty.txt", size: 0, chunkSize: 1024).answer.uploadId
            #expect(try await client.status(id: id).received == [])
            let answer = try #require(try await client.complete(id: id).answer)
            #expect(answer.sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            let download = try await curl("GET", answer.url)
            #expect(download.status == 200)
            #expect(download.body.isEmpty)
            #expect(download.headers["content-length"] == "0")
        }
    }

    @Test("delete removes state and data")
    func deleteUpload() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(20, seed: 10)
            let pending = try await client.create(fileName: "p.bin", size: data.count, chunkSize: 10).answer.uploadId
            #expect(try await client.patch(id: pending, chunk: 1, of: data, chunkSize: 10).status == 204)
            #expect(try await curl("DELETE", server.baseURL + "/uploads/" + pending).status == 204)
            #expect(try await curl("GET", server.baseURL + "/uploads/" + pending).status == 404)
            #expect(try await client.patch(id: pending, chunk: 2, of: data, chunkSize: 10).status == 404)
            #expect(try await curl("DELETE", server.baseURL + "/uploads/" + pending).status == 404)
            #expect(!FileManager.default.fileExists(atPath: server.root + "/uploads/" + storedID(pending) + ".log"))

            let done = try await client.create(fileName: "d.bin", size: data.count, chunkSize: 20).answer.uploadId
            #expect(try await client.patch(id: done, chunk: 1, of: data, chunkSize: 20).status == 204)
            let url = try #require(try await client.complete(id: done).answer?.url)
            #expect(try await curl("DELETE", server.baseURL + "/uploads/" + done).status == 204)
            #expect(try await curl("GET", url).status == 404)
            #expect(!FileManager.default.fileExists(atPath: server.root + "/downloads/" + storedID(done)))
        }
    }

    @Test("the create answer asks for Content-Digest; crc32c and sha-256 digests are checked, and the completion reports the file's CRC-32C")
    func contentDigestNegotiation() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(300, seed: 21)
            let created = try await client.create(fileName: "d.bin", size: data.count, chunkSize: 100)
            #expect(created.reply.headers["want-content-digest"] == "crc32c=10, sha-256=5")
            let id = created.answer.uploadId
            func crc32c(_ bytes: Data) -> String {
                Data(CRC32.bigEndianBytes(CRC32C.of(Array(bytes)))).base64EncodedString()
            }
            func sha256(_ bytes: Data) -> String { Data(SHA256.hash(data: bytes)).base64EncodedString() }
            let first = data[0..<100], second = data[100..<200], third = data[200..<300]
            // Right digests are accepted, in either algorithm, and an unknown one is ignored.
            #expect(try await client.patchRaw(
                id: id, chunk: 1, body: first, range: "bytes 0-99/300",
                extraHeaders: ["Content-Digest: unknown-algo=:AAAA:, crc32c=:\(crc32c(first)):"]).status == 204)
            #expect(try await client.patchRaw(
                id: id, chunk: 2, body: second, range: "bytes 100-199/300",
                extraHeaders: ["Content-Digest: sha-256=:\(sha256(second)):"]).status == 204)
            // A wrong one is refused with 422 and leaves the chunk missing; a malformed one with 400.
            let wrong = try await client.patchRaw(
                id: id, chunk: 3, body: third, range: "bytes 200-299/300",
                extraHeaders: ["Content-Digest: crc32c=:\(crc32c(first)):"])
            #expect(wrong.status == 422)
            let malformed = try await client.patchRaw(
                id: id, chunk: 3, body: third, range: "bytes 200-299/300", extraHeaders: ["Content-Digest: crc32c=AAAA"])
            #expect(malformed.status == 400)
            #expect(try await client.status(id: id).received == [1, 2])
            #expect(try await client.patchRaw(
                id: id, chunk: 3, body: third, range: "bytes 200-299/300",
                extraHeaders: ["Content-Digest: crc32c=:\(crc32c(third)):"]).status == 204)
            let completed = try await client.complete(id: id)
            #expect(completed.answer?.crc32c == CRC32.hex(CRC32C.of(Array(data))))
        }
    }

    @Test("a file whose every chunk came with its CRC-32C completes from their combination, without a SHA-256, also after a restart")
    func completionFromChunkCRCs() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = testBytes(250, seed: 22)
        func crc32c(_ bytes: Data) -> String { Data(CRC32.bigEndianBytes(CRC32C.of(Array(bytes)))).base64EncodedString() }
        var id = ""
        do {
            let server = try await RunningReceiver.start(root: root)
            let client = PatchTestClient(base: server.baseURL)
            id = try await client.create(fileName: "c.bin", size: data.count, chunkSize: 100).answer.uploadId
            for (chunk, range) in [(1, 0..<100), (2, 100..<200), (3, 200..<250)] {
                #expect(try await client.patchRaw(
                    id: id, chunk: chunk, body: data[range], range: "bytes \(range.lowerBound)-\(range.upperBound - 1)/250",
                    extraHeaders: ["Content-Digest: crc32c=:\(crc32c(data[range])):"]).status == 204)
            }
            try await server.stop()
        }
        // Restarted before completing: the chunks' CRCs come back from the log.
        let server = try await RunningReceiver.start(root: root)
        let client = PatchTestClient(base: server.baseURL)
        let completed = try #require(try await client.complete(id: id).reply)
        #expect(completed.status == 200)
        let body = try JSONSerialization.jsonObject(with: completed.body) as? [String: String]
        #expect(body?["crc32c"] == CRC32.hex(CRC32C.of(Array(data))))
        #expect(body?["sha256"] == nil, "the file was not read back")
        #expect(try await curl("GET", try #require(body?["url"])).body == data)
        // Completing again answers the same.
        let again = try JSONSerialization.jsonObject(with: try await client.complete(id: id).reply.body) as? [String: String]
        #expect(again == body)
        try await server.stop()
    }

    @Test("discovery offers a file whole with its creation; such a file is complete at once, its CRC-32C reported, and a restart keeps it")
    func wholeCreation() async throws {
        let root = try makeTemporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = testBytes(5000, seed: 31)
        let created: WholeBody
        do {
            let server = try await RunningReceiver.start(root: root) { $0.maximumChunkSize = 64 << 10 }
            let client = PatchTestClient(base: server.baseURL)
            let discovery = try await curl("OPTIONS", server.baseURL + "/uploads")
            #expect(discovery.status == 204)
            #expect(discovery.headers["accept-post"] == "application/json, application/octet-stream")
            #expect(discovery.headers["upload-limit"] == "max-size=\(ReceiverConfiguration(root: root).maximumUploadSize), max-append-size=\(64 << 10)")
            #expect(discovery.headers["want-content-digest"] == "crc32c=10, sha-256=5")

            let reply = try await client.createWhole(fileName: "photos/été 1.jpg", body: data, headers: ["Content-Digest: crc32c=:\(crc32cBase64(data)):"])
            #expect(reply.status == 201, "\(reply.text)")
            created = try reply.decode(WholeBody.self)
            #expect(created.crc32c == CRC32.hex(CRC32C.of(Array(data))))
            #expect(created.url == server.baseURL + "/downloads/\(storedID(created.uploadId))/photos/%C3%A9t%C3%A9%201.jpg")
            #expect(reply.headers["location"] == server.baseURL + "/uploads/" + created.uploadId)
            #expect(try await curl("GET", created.url).body == data)
            // Complete already: its status and completion answer as a finished upload's.
            #expect(try await client.complete(id: created.uploadId).reply.status == 200)

            // An empty file, and one whose bytes carry their MD5.
            let empty = try await client.createWhole(fileName: "empty", body: Data())
            #expect(empty.status == 201, "\(empty.text)")
            #expect(try await curl("GET", try empty.decode(WholeBody.self).url).body.isEmpty)
            let md5 = try await client.createWhole(fileName: "m.bin", body: data, headers: ["Content-MD5: " + md5Base64(data)])
            #expect(md5.status == 201, "\(md5.text)")
            try await server.stop()
        }
        do {
            let server = try await RunningReceiver.start(root: root)
            #expect(try await curl("GET", server.baseURL + "/downloads/\(storedID(created.uploadId))/photos/%C3%A9t%C3%A9%201.jpg").body == data)
            try await server.stop()
        }
    }

    @Test("a file brought with its creation is refused whole, leaving nothing, when its digest, name, length or size is wrong")
    func wholeCreationRefusals() async throws {
        try await withReceiver(configure: { $0.maximumChunkSize = 4096 }) { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(3000, seed: 32)
            let uploads = server.root + "/uploads"
            let before = try FileManager.default.contentsOfDirectory(atPath: uploads)
            let wrong = try await client.createWhole(fileName: "a.bin", body: data, headers: ["Content-Digest: crc32c=:\(crc32cBase64(Data(data.reversed()))):"])
            #expect(wrong.status == 422, "\(wrong.text)")
            let badMD5 = try await client.createWhole(fileName: "a.bin", body: data, headers: ["Content-MD5: " + md5Base64(Data(data.reversed()))])
            #expect(badMD5.status == 422, "\(badMD5.text)")
            #expect(try await client.createWhole(fileName: nil, body: data).status == 400)
            #expect(try await client.createWhole(fileName: "../escape", body: data).status == 400)
            #expect(try await client.createWhole(fileName: "big.bin", body: testBytes(5000, seed: 33)).status == 413)
            let unencoded = try await curl(
                "POST", server.baseURL + "/uploads?fileName=%zz", headers: ["Content-Type: application/octet-stream"], body: data)
            #expect(unencoded.status == 400)
            // A body cut short of its Content-Length.
            let head = "POST /uploads?fileName=cut.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + "Content-Type: application/octet-stream\r\nContent-Length: 3000\r\n\r\n"
            let answer = try await sendAndHalfClose(port: server.port, bytes: Array(head.utf8) + Array(data[0..<1000]))
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: uploads).sorted() == before.sorted(), "nothing left behind")
            #expect(try FileManager.default.contentsOfDirectory(atPath: server.root + "/downloads").isEmpty)
        }
    }

    @Test("Expect: 100-continue is answered")
    func expectContinue() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(2000, seed: 11)
            let id = try await client.create(fileName: "e.bin", size: data.count, chunkSize: 2000).answer.uploadId
            // Without an answer curl would wait the full 30 s and print no 100 line; with one it goes on at once.
            let reply = try await client.patchRaw(
                id: id, chunk: 1, body: data, range: "bytes 0-1999/2000", md5: md5Base64(data),
                expect: "Expect: 100-continue", extraArguments: ["-v", "--expect100-timeout", "30"])
            #expect(reply.status == 204)
            #expect(reply.stderr.contains("HTTP/1.1 100 Continue"))
        }
    }

    @Test("a body cut mid-way never marks its chunk received")
    func cutBody() async throws {
        try await withReceiver { server in
            let client = PatchTestClient(base: server.baseURL)
            let data = testBytes(2000, seed: 12)
            let id = try await client.create(fileName: "cut.bin", size: data.count, chunkSize: 1000).answer.uploadId
            #expect(try await client.patch(id: id, chunk: 1, of: data, chunkSize: 1000).status == 204)

            for (chunk, range) in [(2, "bytes 1000-1999/2000"), (1, "bytes 0-999/2000")] {
                // Half the body, then the client's side of the connection closes. The server answers
                // (and so has finished with the request) before it closes its side.
                let head = "PATCH /uploads/\(id)/chunks/\(chunk) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + "Content-Type: application/octet-stream\r\nContent-Range: \(range)\r\nContent-Length: 1000\r\n\r\n"
                let answer = try await sendAndHalfClose(
                    port: server.port, bytes: Array(head.utf8) + Array(data[(chunk - 1) * 1000..<((chunk - 1) * 1000 + 500)]))
                #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer)")
            }
            // Chunk 1 was received before the cut resend: its bytes were overwritten, so it is missing now.
            #expect(try await client.status(id: id).received == [])
        }
    }
}

// MARK: - Running a receiver

private struct RunningReceiver: Sendable {
    let baseURL: String
    let root: String
    let task: Task<Void, any Error>

    var port: Int { Int(baseURL.split(separator: ":").last!)! }

    static func start(
        root: String, configure: (inout ReceiverConfiguration) -> Void = { _ in }, testing switches: ReceiverTestSwitches = .init()
    ) async throws -> RunningReceiver {
        var configuration = ReceiverConfiguration(root: root)
        configure(&configuration)
        let receiver = try Receiver(configuration: configuration, testing: switches)
        let (urls, continuation) = AsyncStream.makeStream(of: String.self)
        let task = Task {
            defer { continuation.finish() }
            try await receiver.run { continuation.yield($0) }
        }
        for await url in urls {
            return RunningReceiver(baseURL: url, root: root, task: task)
        }
        try await task.value
        throw TestError("receiver returned without listening")
    }

    /// Cancels the receiver and waits until it has fully stopped.
    func stop() async throws {
        task.cancel()
        try await task.value
    }
}

private func withReceiver(
    configure: (inout ReceiverConfiguration) -> Void = { _ in },
    testing switches: ReceiverTestSwitches = .init(),
    _ body: (RunningReceiver) async throws -> Void
) async throws {
    let root = try makeTemporaryRoot()
    defer { try? FileManager.default.removeItem(atPath: root) }
    let server = try await RunningReceiver.start(root: root, configure: configure, testing: switches)
    do {
        try await body(server)
    } catch {
        try? await server.stop()
        throw error
    }
    try await server.stop()
}

private func makeTemporaryRoot() throws -> String {
    let path = NSTemporaryDirectory() + "xfer-receiver-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

private struct TestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - The patch protocol, client side

private struct CreateBody: Decodable { var uploadId: String; var chunkSize: Int }
private struct StatusBody: Decodable { var uploadId: String; var fileName: String; var size: Int; var chunkSize: Int; var received: [Int] }
private struct CompleteBody: Decodable { var url: String; var sha256: String?; var crc32c: String? }
private struct MissingBody: Decodable { var missing: [Int] }
private struct ErrorBody: Decodable { var error: String }
private struct WholeBody: Decodable { var uploadId: String; var url: String; var crc32c: String? }

private func crc32cBase64(_ bytes: Data) -> String { Data(CRC32.bigEndianBytes(CRC32C.of(Array(bytes)))).base64EncodedString() }

private struct PatchTestClient: Sendable {
    let base: String

    func create(fileName: String, size: Int, chunkSize: Int) async throws -> (reply: HTTPReply, answer: CreateBody) {
        let json = try JSONSerialization.data(withJSONObject: ["fileName": fileName, "size": size, "chunkSize": chunkSize])
        let reply = try await curl("POST", base + "/uploads", headers: ["Content-Type: application/json"], body: json)
        let answer = reply.status == 201 ? try reply.decode(CreateBody.self) : CreateBody(uploadId: "", chunkSize: 0)
        return (reply, answer)
    }

    /// `POST /uploads?fileName=…` with the whole file (no name: no query).
    func createWhole(fileName: String?, body: Data, headers: [String] = []) async throws -> HTTPReply {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let query = fileName.map { "?fileName=" + ($0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? $0) } ?? ""
        return try await curl("POST", base + "/uploads" + query, headers: ["Content-Type: application/octet-stream", "Expect:"] + headers, body: body)
    }

    /// Sends chunk `chunk` of `data` with correct headers.
    func patch(id: String, chunk: Int, of data: Data, chunkSize: Int) async throws -> HTTPReply {
        let start = (chunk - 1) * chunkSize
        let end = min(start + chunkSize, data.count)
        let body = data[start..<end]
        return try await patchRaw(
            id: id, chunk: chunk, body: body, range: "bytes \(start)-\(end - 1)/\(data.count)", md5: md5Base64(body))
    }

    func patchRaw(
        id: String,
        chunk: Int,
        body: Data,
        range: String?,
        md5: String? = nil,
        expect: String = "Expect:",
        extraHeaders: [String] = [],
        extraArguments: [String] = []
    ) async throws -> HTTPReply {
        var headers = ["Content-Type: application/octet-stream", expect] + extraHeaders
        if let range { headers.append("Content-Range: " + range) }
        if let md5 { headers.append("Content-MD5: " + md5) }
        return try await curl(
            "PATCH", base + "/uploads/\(id)/chunks/\(chunk)", headers: headers, body: body, extraArguments: extraArguments)
    }

    func status(id: String) async throws -> StatusBody {
        let reply = try await curl("GET", base + "/uploads/" + id)
        guard reply.status == 200 else { throw TestError("status \(reply.status): \(reply.text)") }
        return try reply.decode(StatusBody.self)
    }

    func complete(id: String) async throws -> (reply: HTTPReply, answer: CompleteBody?) {
        let reply = try await curl("POST", base + "/uploads/\(id)/complete")
        return (reply, reply.status == 200 ? try reply.decode(CompleteBody.self) : nil)
    }
}

// MARK: - HTTP through curl

private struct HTTPReply: Sendable {
    var status: Int
    var body: Data
    /// Lowercased names; of the final response (not of a 100 Continue).
    var headers: [String: String]
    var stderr: String

    var text: String { String(decoding: body, as: UTF8.self) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: body)
    }
}

private func curl(
    _ method: String,
    _ url: String,
    headers: [String] = [],
    body: Data? = nil,
    extraArguments: [String] = []
) async throws -> HTTPReply {
    let directory = try makeTemporaryRoot()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let bodyPath = directory + "/response", headerPath = directory + "/headers"
    let statusPath = directory + "/status", stderrPath = directory + "/stderr"
    // curl's -X HEAD would wait for a body that never comes; -I is its way to send HEAD.
    let methodArguments = method == "HEAD" ? ["-I"] : ["-X", method]
    var arguments = ["-sS", "-g"] + methodArguments + ["-o", bodyPath, "-D", headerPath, "-w", "%{http_code}", "--max-time", "120"]
    for header in headers { arguments += ["-H", header] }
    if let body {
        let requestPath = directory + "/request"
        try body.write(to: URL(fileURLWithPath: requestPath))
        arguments += ["--data-binary", "@" + requestPath]
    }
    arguments += extraArguments + [url]

    _ = FileManager.default.createFile(atPath: statusPath, contents: nil)
    _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
    process.arguments = arguments
    process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: statusPath))
    process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
    let exitCode: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do {
            try process.run()
        } catch {
            continuation.resume(throwing: error)
        }
    }
    let stderr = String(decoding: FileManager.default.contents(atPath: stderrPath) ?? Data(), as: UTF8.self)
    guard exitCode == 0 else { throw TestError("curl \(method) \(url) exited \(exitCode): \(stderr)") }

    let status = Int(String(decoding: FileManager.default.contents(atPath: statusPath) ?? Data(), as: UTF8.self)) ?? 0
    let rawHeaders = String(decoding: FileManager.default.contents(atPath: headerPath) ?? Data(), as: UTF8.self)
    var fields: [String: String] = [:]
    for line in rawHeaders.components(separatedBy: "\r\n") {
        if line.hasPrefix("HTTP/") {
            fields = [:]  // a new response starts (after an interim 100)
        } else if let colon = line.firstIndex(of: ":") {
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
    return HTTPReply(
        status: status, body: FileManager.default.contents(atPath: bodyPath) ?? Data(), headers: fields, stderr: stderr)
}

// MARK: - A raw socket, for what curl won't do

/// Sends `bytes`, shuts down the write side and returns everything the server says until it closes.
private func sendAndHalfClose(port: Int, bytes: [UInt8]) async throws -> String {
    try await withCheckedThrowingContinuation { continuation in
        // Blocking socket calls stay off the cooperative pool, which the receiver under test needs.
        Thread.detachNewThread {
            continuation.resume(with: Result { try sendAndHalfCloseBlocking(port: port, bytes: bytes) })
        }
    }
}

private func sendAndHalfCloseBlocking(port: Int, bytes: [UInt8]) throws -> String {
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw TestError("socket: errno \(errno)") }
    defer { close(fd) }
    // Bounds a broken server's hang; a working one answers at once.
    var timeout = timeval(tv_sec: 60, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr = in_addr(s_addr: inet_addr("127.0.0.1"))
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw TestError("connect: errno \(errno)") }

    var sent = 0
    while sent < bytes.count {
        let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { throw TestError("send: errno \(errno)") }
        sent += n
    }
    shutdown(fd, Int32(SHUT_WR))

    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n <= 0 { break }
        received += buffer[0..<n]
    }
    return String(decoding: received, as: UTF8.self)
}

// MARK: - Data

private func testBytes(_ count: Int, seed: UInt64) -> Data {
    var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var bytes = [UInt8](repeating: 0, count: count)
    for index in bytes.indices {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        bytes[index] = UInt8(truncatingIfNeeded: state)
    }
    return Data(bytes)
}

private func md5Base64(_ data: some DataProtocol) -> String {
    Data(Insecure.MD5.hash(data: data)).base64EncodedString()
}

private func sha256Hex(_ data: Data) -> String {
    SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
}
