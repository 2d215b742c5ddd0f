package io.tieredstore.broker;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UnsupportedEncodingException;
import java.net.HttpURLConnection;
import java.net.URL;
import java.net.URLEncoder;
import java.nio.ByteBuffer;

/**
 * The sidecar's read API over HTTP/1.1 (keep-alive, JDK only): {@code /v1/cold/range},
 * {@code /v1/cold/records} and {@code /v1/cold/offset} (wire format: docs/serving.md).
 *
 * <p>A 404 is an answer ({@link NotInCold}: cold does not hold the offset, or nothing of
 * the queue); everything else that is not a 200 with a well-formed body is a
 * {@link SidecarException}. Thread-safe.
 */
class SidecarClient {
    /** Cold does not hold what was asked for (HTTP 404). */
    static final class NotInCold extends Exception {
        private static final long serialVersionUID = 1L;

        NotInCold(String message) {
            super(message);
        }
    }

    private final PluginConfig config;

    SidecarClient(PluginConfig config) {
        this.config = config;
    }

    ColdRange range(String topic, int queueId) throws SidecarException {
        ByteBuffer buf = ByteBuffer.wrap(getOrThrow("/v1/cold/range?" + queue(topic, queueId)));
        if (buf.remaining() != 28 || buf.getInt() != 0x54535131) { // "TSQ1"
            throw new SidecarException("not a TSQ1 answer");
        }
        return new ColdRange(buf.getLong(), buf.getLong(), buf.getLong());
    }

    ColdBatch records(String topic, int queueId, long offset, int maxCount, int maxBytes)
        throws SidecarException, NotInCold {
        String path = "/v1/cold/records?" + queue(topic, queueId) + "&offset=" + offset
            + "&maxCount=" + maxCount + "&maxBytes=" + maxBytes;
        ColdBatch batch = ColdBatch.parse(get(path));
        if (batch.offset != offset) {
            throw new SidecarException("TSR1 answer starts at " + batch.offset + ", not " + offset);
        }
        return batch;
    }

    /** The queue offset for a store time (within cold's range). */
    long offsetByTime(String topic, int queueId, long timestamp, boolean upper)
        throws SidecarException, NotInCold {
        String path = "/v1/cold/offset?" + queue(topic, queueId) + "&timestamp=" + timestamp
            + "&boundary=" + (upper ? "upper" : "lower");
        ByteBuffer buf = ByteBuffer.wrap(get(path));
        if (buf.remaining() != 28 || buf.getInt() != 0x54534f31) { // "TSO1"
            throw new SidecarException("not a TSO1 answer");
        }
        return buf.getLong();
    }

    private static String queue(String topic, int queueId) {
        try {
            return "topic=" + URLEncoder.encode(topic, "UTF-8") + "&queue=" + queueId;
        } catch (UnsupportedEncodingException e) {
            throw new IllegalStateException(e); // UTF-8 is always there
        }
    }

    private byte[] getOrThrow(String path) throws SidecarException {
        try {
            return get(path);
        } catch (NotInCold e) {
            throw new SidecarException("unexpected 404 for " + path + ": " + e.getMessage());
        }
    }

    private byte[] get(String path) throws SidecarException, NotInCold {
        HttpURLConnection conn = null;
        try {
            URL url = new URL("http://" + config.getTieredstoreReadAddress() + path);
            conn = (HttpURLConnection) url.openConnection();
            conn.setConnectTimeout(config.getTieredstoreConnectTimeoutMillis());
            conn.setReadTimeout(config.getTieredstoreReadTimeoutMillis());
            conn.setUseCaches(false);
            int status = conn.getResponseCode();
            if (status == 200) {
                return readAll(conn.getInputStream());
            }
            InputStream err = conn.getErrorStream();
            String text = err == null ? "" : new String(readAll(err), "UTF-8");
            if (status == 404) {
                throw new NotInCold(text);
            }
            throw new SidecarException("HTTP " + status + " for " + path + ": " + text);
        } catch (IOException e) {
            throw new SidecarException("sidecar read API unreachable at "
                + config.getTieredstoreReadAddress() + ": " + e, e);
        }
    }

    private static byte[] readAll(InputStream in) throws IOException {
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream(64 << 10);
            byte[] chunk = new byte[64 << 10];
            int n;
            while ((n = in.read(chunk)) >= 0) {
                out.write(chunk, 0, n);
            }
            return out.toByteArray();
        } finally {
            in.close();
        }
    }
}
