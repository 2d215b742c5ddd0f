package io.tieredstore.broker;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * One {@code TSR1} answer: records {@code offset .. offset + count - 1} of a queue as cold
 * holds them, with their consume-queue units (docs/serving.md).
 */
final class ColdBatch {
    final ColdRange range;
    final long offset;
    final long[] coldOffsets;
    final int[] sizes;
    final long[] tagsCodes;
    private final byte[] data;
    private final int[] positions;

    ColdBatch(ColdRange range, long offset, long[] coldOffsets, int[] sizes, long[] tagsCodes,
        byte[] data, int[] positions) {
        this.range = range;
        this.offset = offset;
        this.coldOffsets = coldOffsets;
        this.sizes = sizes;
        this.tagsCodes = tagsCodes;
        this.data = data;
        this.positions = positions;
    }

    int count() {
        return sizes.length;
    }

    /** The i-th record, a buffer of exactly its bytes (position 0). */
    ByteBuffer record(int i) {
        return ByteBuffer.wrap(data, positions[i], sizes[i]).slice();
    }

    /** Records {@code from .. to - 1} of this batch (sharing its bytes). */
    ColdBatch slice(int from, int to) {
        return new ColdBatch(range, offset + from, Arrays.copyOfRange(coldOffsets, from, to),
            Arrays.copyOfRange(sizes, from, to), Arrays.copyOfRange(tagsCodes, from, to), data,
            Arrays.copyOfRange(positions, from, to));
    }

    /** The bytes this batch keeps in memory (the whole answer it came from). */
    long bytes() {
        return data.length;
    }

    /** Parse a {@code TSR1} answer; SidecarException if it is not one. */
    static ColdBatch parse(byte[] body) throws SidecarException {
        ByteBuffer buf = ByteBuffer.wrap(body);
        if (body.length < 32 || buf.getInt() != 0x54535231) { // "TSR1"
            throw new SidecarException("not a TSR1 answer (" + body.length + " bytes)");
        }
        ColdRange range = new ColdRange(buf.getLong(), buf.getLong(), 0);
        long offset = buf.getLong();
        int count = buf.getInt();
        if (count < 1 || (long) count * 20 > buf.remaining()) {
            throw new SidecarException("TSR1 answer with a bad count " + count);
        }
        long[] coldOffsets = new long[count];
        int[] sizes = new int[count];
        long[] tags = new long[count];
        int[] positions = new int[count];
        for (int i = 0; i < count; i++) {
            coldOffsets[i] = buf.getLong();
            sizes[i] = buf.getInt();
            tags[i] = buf.getLong();
        }
        int pos = buf.position();
        for (int i = 0; i < count; i++) {
            if (sizes[i] < 4 || pos + (long) sizes[i] > body.length) {
                throw new SidecarException("TSR1 answer shorter than its units say");
            }
            positions[i] = pos;
            pos += sizes[i];
        }
        if (pos != body.length) {
            throw new SidecarException("TSR1 answer longer than its units say");
        }
        return new ColdBatch(range, offset, coldOffsets, sizes, tags, body, positions);
    }
}
