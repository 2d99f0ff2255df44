export type Logger = import("koishi").Logger;
/**
 * What the plugin sends a request with: the global `fetch`, or `caFetch`'s.
 */
export type Fetch = (url: string, init: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    signal?: AbortSignal;
}) => Promise<Response>;
export type ClientOptions = {
    /**
     * service URL, e.g. http://127.0.0.1:8787 (a path prefix is kept)
     */
    endpoint: string;
    /**
     * API token (Authorization: Bearer ...)
     */
    token?: string | undefined;
    /**
     * ms
     */
    requestTimeout: number;
    /**
     * how requests are sent (`caFetch` for the plugin's caFile); default: the global fetch
     */
    fetch?: Fetch | undefined;
};
/** Logs a refusal once until `clear()`: the same error on every retry is one line. */
export class Once {
    /** @param {(message: string) => void} log */
    constructor(log: (message: string) => void);
    log: (message: string) => void;
    last: string;
    /** @param {string} message */
    say(message: string): void;
    clear(): void;
}
/** @typedef {import('koishi').Logger} Logger */
/**
 * What the plugin sends a request with: the global `fetch`, or `caFetch`'s.
 * @typedef {(url: string, init: { method?: string, headers?: Record<string, string>, body?: string,
 *   signal?: AbortSignal }) => Promise<Response>} Fetch
 */
/**
 * @typedef {object} ClientOptions
 * @property {string} endpoint  service URL, e.g. http://127.0.0.1:8787 (a path prefix is kept)
 * @property {string} [token]   API token (Authorization: Bearer ...)
 * @property {number} requestTimeout  ms
 * @property {Fetch} [fetch]  how requests are sent (`caFetch` for the plugin's caFile); default: the global fetch
 */
/** A request that got an HTTP status other than 2xx. */
export class HttpError extends Error {
    /**
     * @param {string} method @param {string} path @param {number} status @param {string} detail
     * @param {any} [body] the parsed JSON body, if it was JSON (a follower's 409 names the leader;
     *   the service's refusals carry a stable `code`)
     */
    constructor(method: string, path: string, status: number, detail: string, body?: any);
    method: string;
    path: string;
    status: number;
    detail: string;
    /** @type {any} */
    body: any;
    /** the refusal's stable label (`not_a_member`, `forbidden`, …); '' from services before it */
    code: any;
}
/** The request did not reach the service or got no answer (refused, reset, timeout, DNS). */
export class NetworkError extends Error {
}
/** @param {unknown} e */
export function isOutage(e: unknown): boolean;
/** A token of too low a role (the service's 403, `"code": "forbidden"`). @param {unknown} e */
export function isForbidden(e: unknown): boolean;
/** The role a 403 says the request needs ("…; this needs admin"), or null. @param {HttpError} e */
export function neededRole(e: HttpError): string | null;
/** @param {unknown} e @returns {string} */
export function describe(e: unknown): string;
/** A short reason from fetch()'s error (undici hides the useful part in `cause`). @param {any} e */
export function networkReason(e: any): any;
/**
 * The CA the plugin trusts for an https:// endpoint, as the `caFile` option gives it: PEM text
 * (it contains `-----BEGIN CERTIFICATE-----`), or the path of a PEM file, relative to `baseDir`
 * (Koishi's instance directory). Null for ''. Throws, naming the file, when it cannot be read or
 * holds no certificate.
 * @param {string} value @param {string} baseDir @returns {string | null}
 */
export function loadCa(value: string, baseDir: string): string | null;
/**
 * A `fetch` that trusts `ca` (PEM) besides Node's built-in roots, on node:https (the global
 * fetch cannot be given a CA without the undici package). Answers a `Response` as fetch does,
 * its body streamed (the assignment stream); fails as fetch does: a TypeError whose `cause` is
 * the socket's or TLS's error, or the signal's AbortError.
 * @param {string} ca @returns {Fetch}
 */
export function caFetch(ca: string): Fetch;
/**
 * Retry delay: `min` doubling per attempt up to `max`, minus up to 25 % jitter.
 * @param {number} attempt 0 for the first retry @param {number} min @param {number} max
 * @param {() => number} [random]
 */
export function backoff(attempt: number, min: number, max: number, random?: () => number): number;
/** A sleep that `wake()` (or `stop()`) ends early. */
export class Sleeper {
    /** @type {Set<() => void>} */
    waiting: Set<() => void>;
    stopped: boolean;
    /** @param {number} ms @returns {Promise<void>} */
    sleep(ms: number): Promise<void>;
    wake(): void;
    stop(): void;
}
/**
 * Whether the service answers, shared by the reporter and the applier: the first failure of an
 * outage logs one warning, the first success after it one info line; a success wakes every
 * sleeper registered, so the other loop retries at once instead of at its next backoff.
 */
export class Link {
    /** @param {Logger} logger @param {string} endpoint */
    constructor(logger: Logger, endpoint: string);
    /** @type {import('koishi').Logger} */
    logger: import("koishi").Logger;
    endpoint: string;
    down: boolean;
    since: number;
    outages: number;
    /** @type {Set<Sleeper>} */
    sleepers: Set<Sleeper>;
    /** @param {unknown} e */
    fail(e: unknown): void;
    ok(): void;
}
/**
 * One JSON request. Resolves with the parsed body (or null for 204 / empty); throws HttpError or
 * NetworkError.
 * @param {ClientOptions} options @param {string} method @param {string} path
 * @param {unknown} [body] @param {AbortSignal} [signal] aborts with the plugin
 */
export function request(options: ClientOptions, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<any>;
/** @param {ClientOptions} options @param {boolean} json @returns {Record<string, string>} */
export function headers(options: ClientOptions, json: boolean): Record<string, string>;
/** @param {string} endpoint @param {string} path */
export function url(endpoint: string, path: string): string;
/**
 * Server-Sent Events, as far as the service uses them: `event:` and `data:` fields, comments
 * (`:` keep-alives), a blank line ends an event. Feed it decoded text in any chunking.
 */
export class SseParser {
    /** @param {(event: string, data: string) => void} onEvent */
    constructor(onEvent: (event: string, data: string) => void);
    onEvent: (event: string, data: string) => void;
    buffer: string;
    event: string;
    /** @type {string[]} */
    data: string[];
    /** @param {string} text */
    push(text: string): void;
    /** @param {string} line */
    line(line: string): void;
}
