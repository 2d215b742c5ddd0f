package io.tieredstore.broker;

/**
 * The sidecar could not answer: unreachable, too slow, an HTTP error or an answer that
 * does not parse. Never a statement about the data: callers answer "nothing found yet".
 */
class SidecarException extends Exception {
    private static final long serialVersionUID = 1L;

    SidecarException(String message) {
        super(message);
    }

    SidecarException(String message, Throwable cause) {
        super(message, cause);
    }
}
