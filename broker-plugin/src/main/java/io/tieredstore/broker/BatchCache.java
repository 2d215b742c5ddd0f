package io.tieredstore.broker;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Bigger reads per request. A pull wants a consumer-sized batch (the broker's
 * {@code maxTransferCountOnMessageInMemory}, 32 by default); asking the sidecar for that
 * little costs one HTTP round trip per pull. Instead the sidecar is asked for up to
 * {@code tieredstoreBatchMessages} records at once, and the rest is kept, one batch per
 * queue, for that queue's next pulls: a consumer draining history pays one round trip
 * per batch, not per pull.
 *
 * <p>Committed cold records never change, so a kept batch is never stale; retention may
 * delete them while kept, and a pull is then answered from memory with what cold held
 * (the next range read moves the consumer on). Kept batches are evicted least recently
 * used first while their bytes exceed {@code tieredstoreBatchCacheBytes}; 0 turns the
 * cache off (every pull asks the sidecar for exactly what it needs). Thread-safe.
 */
final class BatchCache {
    /** The byte limit of one request for a batch (the sidecar caps it at 16 MiB). */
    static final int BATCH_BYTES = 2 << 20;

    private final SidecarClient client;
    private final int batchMessages;
    private final long capacityBytes;
    private final LinkedHashMap<String, ColdBatch> batches = new LinkedHashMap<>(16, 0.75f, true);
    private long bytes;

    BatchCache(SidecarClient client, int batchMessages, long capacityBytes) {
        this.client = client;
        this.batchMessages = batchMessages;
        this.capacityBytes = capacityBytes;
    }

    /** Records of the queue from {@code offset}: at most {@code maxCount}, and stopping
     * before the record that would take them past {@code maxBytes} (at least one), as
     * {@link SidecarClient#records} answers; from a kept batch when one holds the offset. */
    ColdBatch records(String topic, int queueId, long offset, int maxCount, int maxBytes)
        throws SidecarException, SidecarClient.NotInCold {
        if (capacityBytes <= 0 || batchMessages <= maxCount) {
            return client.records(topic, queueId, offset, maxCount, maxBytes);
        }
        String key = QueueBackoff.key(topic, queueId);
        ColdBatch kept;
        synchronized (this) {
            kept = batches.get(key);
        }
        if (kept == null || offset < kept.offset || offset >= kept.offset + kept.count()) {
            kept = client.records(topic, queueId, offset, batchMessages, Math.max(maxBytes, BATCH_BYTES));
            keep(key, kept);
        }
        return view(kept, offset, maxCount, maxBytes);
    }

    /** Forget what is kept of the queue (cold changed under it: retention). */
    synchronized void invalidate(String topic, int queueId) {
        ColdBatch gone = batches.remove(QueueBackoff.key(topic, queueId));
        if (gone != null) {
            bytes -= gone.bytes();
        }
    }

    synchronized long bytes() {
        return bytes;
    }

    private synchronized void keep(String key, ColdBatch batch) {
        ColdBatch old = batches.put(key, batch);
        bytes += batch.bytes() - (old == null ? 0 : old.bytes());
        Iterator<Map.Entry<String, ColdBatch>> it = batches.entrySet().iterator();
        while (bytes > capacityBytes && it.hasNext()) {
            Map.Entry<String, ColdBatch> eldest = it.next();
            if (eldest.getValue() != batch) {
                bytes -= eldest.getValue().bytes();
                it.remove();
            }
        }
    }

    static ColdBatch view(ColdBatch batch, long offset, int maxCount, int maxBytes) {
        int from = (int) (offset - batch.offset);
        int to = from;
        long size = 0;
        while (to < batch.count() && to - from < maxCount
            && (to == from || size + batch.sizes[to] <= maxBytes)) {
            size += batch.sizes[to];
            to++;
        }
        return from == 0 && to == batch.count() ? batch : batch.slice(from, to);
    }
}
