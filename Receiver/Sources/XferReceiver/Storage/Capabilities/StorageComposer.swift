/// Which capabilities a storage has beyond its core, said explicitly (tusd's `StoreComposer`):
/// the storage declares each one in `ComposableStorage.compose(into:)`, the receiver resolves the
/// composer once when it starts, and derives from it the routes it registers and what they
/// advertise. Nothing finds a capability by asking the storage's type.
///
/// A capability may be served by another object than the core (a wrapper, a component shared by
/// every storage): the composer holds each as what provides it.
struct StorageComposer: Sendable {
    /// Everything beyond the core, by name: what a test removes, what the receiver logs it lacks.
    enum Capability: String, CaseIterable, Sendable, Hashable {
        case offsetUploads, concatenation, sequences, multipartSources, wholeFiles, rangeReads, expiry, upkeep, statistics,
            handleKeys
    }

    let core: any UploadStorage
    /// tus and the IETF draft: uploads whose progress is one offset.
    var offsetUploads: (any OffsetUploadStoring)?
    /// tus's final uploads made of partial ones (needs `offsetUploads`).
    var concatenation: (any OffsetUploadConcatenating)?
    /// sequence's ordered blocks and tokens.
    var sequences: (any SequenceUploadStoring)?
    /// multipart's sources.
    var multipartSources: (any MultipartSourceStoring)?
    /// raw's whole files.
    var wholeFiles: (any WholeFileStoring)?
    /// Downloads by byte range.
    var rangeReads: (any PublishedRangeReading)?
    /// Unfinished uploads expire; nil: they are kept until a client deletes them.
    var expiry: StorageExpiry?
    /// Memory of unfinished uploads let go when idle.
    var upkeep: (any IdleUploadDropping)?
    /// `GET /stats`'s counters.
    var statistics: (any StatisticsReporting)?
    /// The key of upload handles kept where every receiver of the storage finds it, across
    /// restarts; without it each process makes its own (its upload URLs hold while it runs).
    var handleKeys: (any HandleKeyKeeping)?

    /// The smallest chunk the storage takes as it is, for a file of more than one (an object
    /// store's minimum part size): a protocol whose server chooses the chunk size (patch) answers
    /// at least this. A trait, not a capability: 1 unless the storage says otherwise.
    var preferredMinimumChunkSize = 1

    /// The core alone: no capability until one is declared.
    init(core: any UploadStorage) {
        self.core = core
    }

    /// Every capability `storage` declares.
    init(composing storage: some ComposableStorage) {
        self.init(core: storage)
        storage.compose(into: &self)
    }

    /// The capabilities declared, by name.
    var capabilities: Set<Capability> {
        var found: Set<Capability> = []
        if offsetUploads != nil { found.insert(.offsetUploads) }
        if concatenation != nil { found.insert(.concatenation) }
        if sequences != nil { found.insert(.sequences) }
        if multipartSources != nil { found.insert(.multipartSources) }
        if wholeFiles != nil { found.insert(.wholeFiles) }
        if rangeReads != nil { found.insert(.rangeReads) }
        if expiry != nil { found.insert(.expiry) }
        if upkeep != nil { found.insert(.upkeep) }
        if statistics != nil { found.insert(.statistics) }
        if handleKeys != nil { found.insert(.handleKeys) }
        return found
    }

    /// This composer without `capability`: what a receiver whose storage lacks it serves.
    func removing(_ capability: Capability) -> StorageComposer {
        var composer = self
        switch capability {
        case .offsetUploads: composer.offsetUploads = nil
        case .concatenation: composer.concatenation = nil
        case .sequences: composer.sequences = nil
        case .multipartSources: composer.multipartSources = nil
        case .wholeFiles: composer.wholeFiles = nil
        case .rangeReads: composer.rangeReads = nil
        case .expiry: composer.expiry = nil
        case .upkeep: composer.upkeep = nil
        case .statistics: composer.statistics = nil
        case .handleKeys: composer.handleKeys = nil
        }
        return composer
    }
}

/// A storage that says which capabilities it has (each a protocol of Storage/Capabilities/).
protocol ComposableStorage: UploadStorage {
    /// Declares every capability this storage provides, each explicitly (`composer.sequences =
    /// self`): a capability the storage's type conforms to but does not declare here is not used.
    func compose(into composer: inout StorageComposer)
}
