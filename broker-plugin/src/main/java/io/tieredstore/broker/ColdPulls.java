package io.tieredstore.broker;

import java.nio.ByteBuffer;
import org.apache.rocketmq.common.constant.LoggerName;
import org.apache.rocketmq.logging.org.slf4j.Logger;
import org.apache.rocketmq.logging.org.slf4j.LoggerFactory;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.MessageFilter;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * Pulls of offsets below the broker's hot minimum, served from the sidecar.
 *
 * <p>Answers, for a pull of queue offset {@code o < hotMin}:
 * <ul>
 * <li>cold holds {@code o}: FOUND with one buffer per raw record (filtered on the units'
 * tagsCode, then on the record, as the broker filters hot data), at most {@code maxMsgNums}
 * and the broker's per-pull limits for messages in memory
 * ({@code maxTransferCountOnMessageInMemory}, {@code maxTransferBytesOnMessageInMemory});
 * never past {@code hotMin}: the next pull continues in hot. NO_MATCHED_MESSAGE when the
 * filter kept nothing of what was scanned. {@code nextBeginOffset} is one past the last
 * offset scanned.</li>
 * <li>{@code o} below cold min: OFFSET_TOO_SMALL with {@code nextBeginOffset} = cold min.</li>
 * <li>cold holds nothing at or above {@code o} (nothing tiered, or offsets lost before
 * tiering): null, and the broker answers as it would without the plugin.</li>
 * <li>the sidecar is unreachable, slow, or answers an error: OFFSET_FOUND_NULL with
 * {@code nextBeginOffset = o} ("nothing found yet"), never OFFSET_TOO_SMALL, and the queue
 * is paused ({@link QueueBackoff}).</li>
 * </ul>
 */
final class ColdPulls {
    private static final Logger LOG = LoggerFactory.getLogger(LoggerName.STORE_LOGGER_NAME);
    /** Batches of filtered-out records one pull may scan before it answers NO_MATCHED. */
    private static final int SCAN_BATCHES = 4;

    private final BatchCache batches;
    private final RangeCache ranges;
    private final QueueBackoff backoff;
    private final Counters counters;
    private final MessageStoreConfig storeConfig;

    ColdPulls(BatchCache batches, RangeCache ranges, QueueBackoff backoff, Counters counters,
        MessageStoreConfig storeConfig) {
        this.batches = batches;
        this.ranges = ranges;
        this.backoff = backoff;
        this.counters = counters;
        this.storeConfig = storeConfig;
    }

    /** Serve a pull of {@code offset} from cold, never reading at or past {@code hotMin}
     * (Long.MAX_VALUE: up to cold commit); null when cold holds nothing from there. */
    GetMessageResult pull(String topic, int queueId, long offset, long hotMin, long maxOffset,
        int maxMsgNums, int maxTotalMsgSize, MessageFilter filter) {
        String key = QueueBackoff.key(topic, queueId);
        long now = System.currentTimeMillis();
        if (backoff.paused(key, now)) {
            counters.pausedPulls.incrementAndGet();
            return notFoundYet(offset, Math.min(hotMin, offset), maxOffset);
        }
        ColdRange range;
        try {
            range = ranges.get(topic, queueId, now);
            if (range.isEmpty() || offset >= range.commit) {
                // About to give the broker's own answer (it moves the consumer on): never
                // on a cached range, which may predate the segments that hold the offset.
                ranges.invalidate(topic, queueId);
                range = ranges.get(topic, queueId, now);
            }
        } catch (SidecarException e) {
            return failed(key, topic, queueId, offset, hotMin, maxOffset, e);
        }
        if (range.isEmpty() || offset >= range.commit) {
            return null;
        }
        if (offset < range.min) {
            return answer(GetMessageStatus.OFFSET_TOO_SMALL, new GetMessageResult(0), range.min,
                range.min, maxOffset);
        }
        int maxCount = Math.max(1, Math.min(maxMsgNums, storeConfig.getMaxTransferCountOnMessageInMemory()));
        int maxBytes = Math.max(1, Math.min(maxTotalMsgSize, storeConfig.getMaxTransferBytesOnMessageInMemory()));
        GetMessageResult result = new GetMessageResult(maxCount);
        long end = Math.min(hotMin, range.commit);
        long next = offset;
        int filtered = 0;
        for (int scans = 0; result.getMessageCount() == 0 && next < end && scans < SCAN_BATCHES; scans++) {
            ColdBatch batch;
            try {
                batch = batches.records(topic, queueId, next, maxCount, maxBytes);
            } catch (SidecarClient.NotInCold e) {
                // Cold changed since the range was read (retention): read it again next time.
                ranges.invalidate(topic, queueId);
                batches.invalidate(topic, queueId);
                if (result.getMessageCount() > 0 || next > offset) {
                    break;
                }
                return notFoundYet(offset, Math.min(hotMin, offset), maxOffset);
            } catch (SidecarException e) {
                if (next > offset) {
                    break; // what was scanned stands; the next pull asks again
                }
                return failed(key, topic, queueId, offset, hotMin, maxOffset, e);
            }
            backoff.succeeded(key);
            for (int i = 0; i < batch.count() && batch.offset + i < end; i++) {
                long queueOffset = batch.offset + i;
                next = queueOffset + 1;
                ByteBuffer record = batch.record(i);
                if (filter != null && (!filter.isMatchedByConsumeQueue(batch.tagsCodes[i], null)
                    || !filter.isMatchedByCommitLog(record.slice(), null))) {
                    filtered++;
                    continue;
                }
                result.addMessage(new SelectMappedBufferResult(batch.coldOffsets[i], record,
                    batch.sizes[i], null), queueOffset, 1);
            }
        }
        counters.coldPulls.incrementAndGet();
        counters.coldMessages.addAndGet(result.getMessageCount());
        counters.coldBytes.addAndGet(result.getBufferTotalSize());
        result.setFilterMessageCount(filtered);
        GetMessageStatus status = result.getMessageCount() > 0
            ? GetMessageStatus.FOUND : GetMessageStatus.NO_MATCHED_MESSAGE;
        return answer(status, result, next, range.min, maxOffset);
    }

    private GetMessageResult failed(String key, String topic, int queueId, long offset, long hotMin,
        long maxOffset, SidecarException e) {
        counters.sidecarErrors.incrementAndGet();
        long pause = backoff.failed(key, System.currentTimeMillis());
        LOG.warn("tieredstore: cold read of {}/{} at offset {} failed, answering 'nothing found yet' "
            + "and pausing the queue's cold reads for {} ms: {}", topic, queueId, offset, pause, e.getMessage());
        return notFoundYet(offset, Math.min(hotMin, offset), maxOffset);
    }

    /** OFFSET_FOUND_NULL at the requested offset: the consumer asks again, skipping nothing. */
    static GetMessageResult notFoundYet(long offset, long minOffset, long maxOffset) {
        return answer(GetMessageStatus.OFFSET_FOUND_NULL, new GetMessageResult(0), offset, minOffset,
            maxOffset);
    }

    private static GetMessageResult answer(GetMessageStatus status, GetMessageResult result,
        long nextBeginOffset, long minOffset, long maxOffset) {
        result.setStatus(status);
        result.setNextBeginOffset(nextBeginOffset);
        result.setMinOffset(minOffset);
        result.setMaxOffset(maxOffset);
        result.setSuggestPullingFromSlave(false);
        return result;
    }
}
