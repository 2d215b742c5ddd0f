package io.tieredstore.broker;

/** Queue offsets {@code [min, commit)} cold holds of one queue ({@code min == commit}: none). */
final class ColdRange {
    final long min;
    final long commit;
    /** storeTimestamp of the message at {@code min}; 0 when the range is empty. */
    final long earliestStoreTime;

    ColdRange(long min, long commit, long earliestStoreTime) {
        this.min = min;
        this.commit = commit;
        this.earliestStoreTime = earliestStoreTime;
    }

    boolean isEmpty() {
        return commit <= min;
    }

    /** True when cold holds {@code offset}. */
    boolean holds(long offset) {
        return min <= offset && offset < commit;
    }

    @Override
    public String toString() {
        return "[" + min + ", " + commit + ")";
    }
}
