import Xfer
import XferPatch

/// The backends `--backend` can name.
enum BuiltInBackend: String, CaseIterable {
    case patch

    var backend: any UploadBackend {
        switch self {
        case .patch: return PatchBackend()
        }
    }
}
