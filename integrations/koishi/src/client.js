// @ts-check
'use strict'
// Talking to the auto-assign service: requests, the Server-Sent Events parser, retry backoff,
// and the shared "is the service reachable" state that logs once per outage.

/** @typedef {import('koishi').Logger} Logger */

/**
 * @typedef {object} ClientOptions
 * @property {string} endpoint  service URL, e.g. http://127.0.0.1:8787 (a path prefix is kept)
 * @property {string} [token]   API token (Authorization: Bearer ...)
 * @property {number} requestTimeout  ms
 */

/** A request that got an HTTP status other than 2xx. */
class HttpError extends Error {
  /** @param {string} method @param {string} path @param {number} status @param {string} detail */
  constructor(method, path, status, detail) {
    super(`${method} ${path}: HTTP ${status}${detail ? ` (${detail})` : ''}`)
    this.status = status
    this.detail = detail
  }
}

/** The request did not reach the service or got no answer (refused, reset, timeout, DNS). */
class NetworkError extends Error {}

/** Statuses that mean "the service is not (properly) there": an outage, logged once. Others
 * (400, 404, 413) are refusals of one request, logged by the caller. */
const OUTAGE_STATUSES = new Set([401, 403, 408, 429, 500, 502, 503, 504])

/** @param {unknown} e */
function isOutage(e) {
  return e instanceof NetworkError || (e instanceof HttpError && OUTAGE_STATUSES.has(e.status))
}

/** @param {unknown} e @returns {string} */
function describe(e) {
  if (e instanceof HttpError) {
    if (e.status === 401) return `${e.message}: check the plugin's token against api.token`
    if (e.status === 404) return `${e.message}: check endpoint, and that the service's config enables sources.http`
    return e.message
  }
  if (e instanceof Error) return e.message
  return String(e)
}

/** A short reason from fetch()'s error (undici hides the useful part in `cause`). @param {any} e */
function networkReason(e) {
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'timed out'
  const cause = e?.cause
  const message = cause?.message || e?.message || String(e)
  return cause?.code && !message.includes(cause.code) ? `${message} (${cause.code})` : message
}

/**
 * Retry delay: `min` doubling per attempt up to `max`, minus up to 25 % jitter.
 * @param {number} attempt 0 for the first retry @param {number} min @param {number} max
 * @param {() => number} [random]
 */
function backoff(attempt, min, max, random = Math.random) {
  const base = Math.min(max, min * 2 ** Math.min(attempt, 30))
  return Math.round(base * (1 - 0.25 * random()))
}

/** A sleep that `wake()` (or `stop()`) ends early. */
class Sleeper {
  constructor() {
    /** @type {Set<() => void>} */
    this.waiting = new Set()
    this.stopped = false
  }

  /** @param {number} ms @returns {Promise<void>} */
  sleep(ms) {
    if (this.stopped) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        this.waiting.delete(done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      this.waiting.add(done)
    })
  }

  wake() {
    for (const done of [...this.waiting]) done()
  }

  stop() {
    this.stopped = true
    this.wake()
  }
}

/**
 * Whether the service answers, shared by the reporter and the applier: the first failure of an
 * outage logs one warning, the first success after it one info line; a success wakes every
 * sleeper registered, so the other loop retries at once instead of at its next backoff.
 */
class Link {
  /** @param {Logger} logger @param {string} endpoint */
  constructor(logger, endpoint) {
    /** @type {import('koishi').Logger} */
    this.logger = logger
    this.endpoint = endpoint
    this.down = false
    this.since = 0
    this.outages = 0
    /** @type {Set<Sleeper>} */
    this.sleepers = new Set()
  }

  /** @param {unknown} e */
  fail(e) {
    if (this.down) return
    this.down = true
    this.since = Date.now()
    this.outages++
    this.logger.warn('service at %s unavailable: %s; Koishi keeps the last assignment, retrying',
      this.endpoint, describe(e))
  }

  ok() {
    if (!this.down) return
    this.down = false
    const seconds = ((Date.now() - this.since) / 1000).toFixed(1)
    this.logger.info('service at %s available again after %s s', this.endpoint, seconds)
    for (const s of this.sleepers) s.wake()
  }
}

/**
 * One JSON request. Resolves with the parsed body (or null for 204 / empty); throws HttpError or
 * NetworkError.
 * @param {ClientOptions} options @param {string} method @param {string} path
 * @param {unknown} [body] @param {AbortSignal} [signal] aborts with the plugin
 */
async function request(options, method, path, body, signal) {
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), options.requestTimeout)
  const onAbort = () => controller.abort()
  signal?.addEventListener('abort', onAbort)
  /** @type {Response} */
  let res
  let text
  try {
    res = await fetch(url(options.endpoint, path), {
      method,
      headers: headers(options, body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal,
    })
    text = await res.text()
  } catch (e) {
    throw new NetworkError(controller.signal.aborted && !signal?.aborted ? 'timed out' : networkReason(e))
  } finally {
    clearTimeout(timer)
    signal?.removeEventListener('abort', onAbort)
  }
  if (!res.ok) throw new HttpError(method, path, res.status, errorDetail(text))
  if (!text) return null
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

/** @param {string} text */
function errorDetail(text) {
  try {
    const body = JSON.parse(text)
    if (typeof body?.error === 'string') return body.error
  } catch {}
  return text.slice(0, 200)
}

/** @param {ClientOptions} options @param {boolean} json @returns {Record<string, string>} */
function headers(options, json) {
  /** @type {Record<string, string>} */
  const h = { accept: 'application/json' }
  if (options.token) h.authorization = 'Bearer ' + options.token
  if (json) h['content-type'] = 'application/json'
  return h
}

/** @param {string} endpoint @param {string} path */
function url(endpoint, path) {
  return endpoint.replace(/\/+$/, '') + path
}

/**
 * Server-Sent Events, as far as the service uses them: `event:` and `data:` fields, comments
 * (`:` keep-alives), a blank line ends an event. Feed it decoded text in any chunking.
 */
class SseParser {
  /** @param {(event: string, data: string) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent
    this.buffer = ''
    this.event = ''
    /** @type {string[]} */
    this.data = []
  }

  /** @param {string} text */
  push(text) {
    this.buffer += text
    for (;;) {
      const i = this.buffer.indexOf('\n')
      if (i < 0) break
      let line = this.buffer.slice(0, i)
      this.buffer = this.buffer.slice(i + 1)
      if (line.endsWith('\r')) line = line.slice(0, -1)
      this.line(line)
    }
  }

  /** @param {string} line */
  line(line) {
    if (line === '') {
      if (this.data.length) this.onEvent(this.event || 'message', this.data.join('\n'))
      this.event = ''
      this.data = []
      return
    }
    if (line.startsWith(':')) return
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') this.event = value
    else if (field === 'data') this.data.push(value)
  }
}

/** Logs a refusal once until `clear()`: the same error on every retry is one line. */
class Once {
  /** @param {(message: string) => void} log */
  constructor(log) {
    this.log = log
    this.last = ''
  }

  /** @param {string} message */
  say(message) {
    if (message === this.last) return
    this.last = message
    this.log(message)
  }

  clear() {
    this.last = ''
  }
}

module.exports = {
  Once,
  HttpError, NetworkError, isOutage, describe, networkReason, backoff, Sleeper, Link, request, headers, url, SseParser,
}
