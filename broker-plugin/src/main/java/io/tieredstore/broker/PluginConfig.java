package io.tieredstore.broker;

/**
 * The plugin's settings, read from broker.conf through
 * {@code MessageStorePluginContext.registerConfiguration} (RocketMQ sets a field from the
 * key of the same name). Every key starts with {@code tieredstore} so it never clashes
 * with a broker setting.
 *
 * <pre>
 * tieredstoreReadAddress          = 127.0.0.1:9781  the sidecar's read API (reads.bind:reads.port)
 * tieredstoreConnectTimeoutMillis = 300             connecting to it
 * tieredstoreReadTimeoutMillis    = 3000            one answer
 * tieredstoreBackoffMinMillis     = 500             first pause of a queue after a failure
 * tieredstoreBackoffMaxMillis     = 15000           longest pause (doubling in between)
 * tieredstoreRangeCacheMillis     = 1000            how long a queue's cold range is reused
 * tieredstoreReadThreads          = 4               threads serving cold pulls
 * tieredstoreBatchMessages        = 256             records asked of the sidecar at once
 * tieredstoreBatchCacheBytes      = 33554432        memory for the batches kept (0: off)
 * </pre>
 */
public class PluginConfig {
    private String tieredstoreReadAddress = "127.0.0.1:9781";
    private int tieredstoreConnectTimeoutMillis = 300;
    private int tieredstoreReadTimeoutMillis = 3000;
    private long tieredstoreBackoffMinMillis = 500;
    private long tieredstoreBackoffMaxMillis = 15000;
    private long tieredstoreRangeCacheMillis = 1000;
    private int tieredstoreReadThreads = 4;
    private int tieredstoreBatchMessages = 256;
    private long tieredstoreBatchCacheBytes = 32L << 20;

    public String getTieredstoreReadAddress() {
        return tieredstoreReadAddress;
    }

    public void setTieredstoreReadAddress(String value) {
        this.tieredstoreReadAddress = value;
    }

    public int getTieredstoreConnectTimeoutMillis() {
        return tieredstoreConnectTimeoutMillis;
    }

    public void setTieredstoreConnectTimeoutMillis(int value) {
        this.tieredstoreConnectTimeoutMillis = value;
    }

    public int getTieredstoreReadTimeoutMillis() {
        return tieredstoreReadTimeoutMillis;
    }

    public void setTieredstoreReadTimeoutMillis(int value) {
        this.tieredstoreReadTimeoutMillis = value;
    }

    public long getTieredstoreBackoffMinMillis() {
        return tieredstoreBackoffMinMillis;
    }

    public void setTieredstoreBackoffMinMillis(long value) {
        this.tieredstoreBackoffMinMillis = value;
    }

    public long getTieredstoreBackoffMaxMillis() {
        return tieredstoreBackoffMaxMillis;
    }

    public void setTieredstoreBackoffMaxMillis(long value) {
        this.tieredstoreBackoffMaxMillis = value;
    }

    public long getTieredstoreRangeCacheMillis() {
        return tieredstoreRangeCacheMillis;
    }

    public void setTieredstoreRangeCacheMillis(long value) {
        this.tieredstoreRangeCacheMillis = value;
    }

    public int getTieredstoreReadThreads() {
        return tieredstoreReadThreads;
    }

    public void setTieredstoreReadThreads(int value) {
        this.tieredstoreReadThreads = value;
    }

    public int getTieredstoreBatchMessages() {
        return tieredstoreBatchMessages;
    }

    public void setTieredstoreBatchMessages(int value) {
        this.tieredstoreBatchMessages = value;
    }

    public long getTieredstoreBatchCacheBytes() {
        return tieredstoreBatchCacheBytes;
    }

    public void setTieredstoreBatchCacheBytes(long value) {
        this.tieredstoreBatchCacheBytes = value;
    }

    /** One line naming the first bad value, or null when every value can be used. */
    String problem() {
        if (tieredstoreReadAddress == null || !tieredstoreReadAddress.matches("[^/\\s]+:\\d{1,5}")) {
            return "tieredstoreReadAddress must be host:port, got " + tieredstoreReadAddress;
        }
        if (tieredstoreConnectTimeoutMillis < 1 || tieredstoreReadTimeoutMillis < 1) {
            return "tieredstoreConnectTimeoutMillis and tieredstoreReadTimeoutMillis must be >= 1";
        }
        if (tieredstoreBackoffMinMillis < 1 || tieredstoreBackoffMaxMillis < tieredstoreBackoffMinMillis) {
            return "tieredstoreBackoffMinMillis must be >= 1 and <= tieredstoreBackoffMaxMillis";
        }
        if (tieredstoreRangeCacheMillis < 0 || tieredstoreReadThreads < 1) {
            return "tieredstoreRangeCacheMillis must be >= 0 and tieredstoreReadThreads >= 1";
        }
        if (tieredstoreBatchMessages < 1 || tieredstoreBatchMessages > 1000 || tieredstoreBatchCacheBytes < 0) {
            return "tieredstoreBatchMessages must be in 1..1000 and tieredstoreBatchCacheBytes >= 0";
        }
        return null;
    }
}
