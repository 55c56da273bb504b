import Foundation
import FoundationXML
import XCTest
import XferS3Core

/// S3's and STS's XML answers, read by XferS3Core's own reader (issue 44: Foundation's
/// XMLParser brought libxml2, full Foundation and its ICU data into the static binary). Real
/// answers read as before, and what is not well-formed, cut short or hostile is refused.
final class S3XMLTests: XCTestCase {
    private func read(_ text: String, records: Set<String> = []) -> S3XML? {
        S3XML(Array(text.utf8), recordNames: records)
    }

    func testAListPartsAnswerReadsIntoFieldsAndRecords() throws {
        let xml = try XCTUnwrap(read("""
            <?xml version="1.0" encoding="UTF-8"?>
            <ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
              <Bucket>b</Bucket><Key>dir/a &amp; b.txt</Key>
              <!-- a comment -->
              <IsTruncated>false</IsTruncated>
              <Part><PartNumber>1</PartNumber><ETag>&quot;abc&quot;</ETag><Size>5242880</Size></Part>
              <Part><PartNumber>2</PartNumber><ETag>"def"</ETag><Size>7</Size></Part>
              <Owner/>
            </ListPartsResult>
            """, records: ["Part"]))
        XCTAssertEqual(xml.root, "ListPartsResult")
        XCTAssertEqual(xml.fields["Key"], "dir/a & b.txt")
        XCTAssertEqual(xml.fields["IsTruncated"], "false")
        XCTAssertEqual(xml.fields["Owner"], "")
        XCTAssertEqual(xml.records.map { $0["PartNumber"] }, ["1", "2"])
        XCTAssertEqual(xml.records.map { $0["ETag"] }, ["\"abc\"", "\"def\""])
    }

    func testSTSNestedLeavesEntitiesAndCDATA() throws {
        let xml = try XCTUnwrap(read("""
            \u{FEFF}<AssumeRoleResponse><AssumeRoleResult><Credentials>
            <AccessKeyId>AKIA&#65;&#x42;</AccessKeyId><SessionToken><![CDATA[a<b>&c]]></SessionToken>
            <SecretAccessKey>s&apos;&lt;&gt;</SecretAccessKey></Credentials></AssumeRoleResult></AssumeRoleResponse>
            """))
        XCTAssertEqual(xml.leaves["AccessKeyId"], "AKIAAB")
        XCTAssertEqual(xml.leaves["SessionToken"], "a<b>&c")
        XCTAssertEqual(xml.leaves["SecretAccessKey"], "s'<>")
    }

    func testAnErrorAnswerWithAttributesAndNamespacePrefixes() throws {
        let xml = try XCTUnwrap(read("<s3:Error a='1' b = \"2\"><s3:Code>NoSuchKey</s3:Code><Message>gone</Message></s3:Error>"))
        XCTAssertEqual(xml.root, "s3:Error")
        XCTAssertEqual(xml.fields["s3:Code"], "NoSuchKey")
    }

    func testWhatIsNotWellFormedOrIsCutShortIsRefused() {
        let refused = [
            "", "   ", "<Error>", "<Error><Code>x</Code>", "<Error></Errors>", "<Error><Code></Error></Code>",
            "text<Error/>", "<Error/>trailing", "<Error/><Second/>", "<Error>&unknown;</Error>", "<Error>&amp</Error>",
            "<Error>&#0;</Error>", "<Error>&#xD800;</Error>", "<!DOCTYPE x [<!ENTITY a \"b\">]><Error>&a;</Error>",
            "<Error a=1/>", "<Error a=\"1/>", "<Error<x/>", "<Error><!-- unterminated </Error>", "<Error><![CDATA[x</Error>",
            "</Error>", "<?xml version=\"1.0\"?>",
        ]
        for text in refused {
            XCTAssertNil(read(text), "took '\(text)'")
        }
        XCTAssertNil(S3XML([0x3C, 0x61, 0x3E, 0xFF, 0xFE, 0x3C, 0x2F, 0x61, 0x3E]), "bytes that are not UTF-8")
    }

    func testDepthAndSizeAreBounded() {
        let deep = String(repeating: "<a>", count: 100_000) + String(repeating: "</a>", count: 100_000)
        XCTAssertNil(read(deep), "nesting past the reader's depth")
        let shallowEnough = String(repeating: "<a>", count: 20) + "x" + String(repeating: "</a>", count: 20)
        XCTAssertEqual(read(shallowEnough)?.leaves["a"], "x")
        let long = "<Key>" + String(repeating: "k", count: 1 << 20) + "</Key>"
        XCTAssertEqual(read(long)?.root, "Key")
    }

    func testTheSameDocumentsReadAsFoundationsParserReadThem() throws {
        // What XMLParser (without namespace processing) gives as each leaf's text, for the
        // shapes the stores send.
        let document = "<R><A>1 &lt; 2</A><B>  spaced  </B><C></C><D>é&#233;</D></R>"
        let ours = try XCTUnwrap(read(document))
        final class Leaves: NSObject, XMLParserDelegate {
            var text = ""
            var leaves: [String: String] = [:]
            func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) { text = "" }
            func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }
            func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
                if name != "R" { leaves[name] = text }
                text = ""
            }
        }
        let delegate = Leaves()
        let parser = XMLParser(data: Data(document.utf8))
        parser.delegate = delegate
        XCTAssertTrue(parser.parse())
        XCTAssertEqual(ours.fields, delegate.leaves)
    }
}
