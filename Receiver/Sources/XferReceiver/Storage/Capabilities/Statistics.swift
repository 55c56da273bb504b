// Capability: counters of what clients sent (`GET /stats`), `StorageComposer.statistics`.
// Without it `/stats` answers zeros.

protocol StatisticsReporting: AnyObject, Sendable {
    /// Counters of what clients sent, since the receiver started.
    var statistics: ReceiverStatistics { get }
    /// Rounds of the storage's group commit so far; 0 where there is none.
    var syncRounds: Int { get }
}
