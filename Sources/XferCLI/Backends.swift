import Xfer
import XferMultipart
import XferPatch
import XferSequence

/// The backends `--backend` can name.
enum BuiltInBackend: String, CaseIterable {
    case patch
    case multipart
    case sequence

    var backend: any UploadBackend {
        switch self {
        case .patch: return PatchBackend()
        case .multipart: return MultipartBackend()
        case .sequence: return SequenceBackend()
        }
    }
}
