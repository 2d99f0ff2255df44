// @ts-check
'use strict'
// Talking to the auto-assign service: requests (over HTTP, or HTTPS with the plugin's own CA),
// the Server-Sent Events parser, retry backoff, and the shared "is the service reachable" state
// that logs once per outage.

const http = require('node:http')
const https = require('node:https')
const { rootCertificates } = require('node:tls')
const { X509Certificate } = require('node:crypto')
const { readFileSync } = require('node:fs')
const { resolve } = require('node:path')
const { Readable } = require('node:stream')

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
class HttpError extends Error {
  /**
   * @param {string} method @param {string} path @param {number} status @param {string} detail
   * @param {any} [body] the parsed JSON body, if it was JSON (a follower's 409 names the leader;
   *   the service's refusals carry a stable `code`)
   */
  constructor(method, path, status, detail, body = null) {
    super(`${method} ${path}: HTTP ${status}${detail ? ` (${detail})` : ''}`)
    this.method = method
    this.path = path
    this.status = status
    this.detail = detail
    /** @type {any} */
    this.body = body
    /** the refusal's stable label (`not_a_member`, `forbidden`, …); '' from services before it */
    this.code = typeof body?.code === 'string' ? body.code : ''
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

/** A token of too low a role (the service's 403, `"code": "forbidden"`). @param {unknown} e */
function isForbidden(e) {
  return e instanceof HttpError && e.status === 403
}

/** The role a 403 says the request needs ("…; this needs admin"), or null. @param {HttpError} e */
function neededRole(e) {
  return /\bneeds (\w+)/.exec(e.detail ?? '')?.[1] ?? null
}

/** @param {unknown} e @returns {string} */
function describe(e) {
  if (e instanceof HttpError) {
    if (e.status === 401) return `${e.message}: check the plugin's token against the service's api.token / api.tokens`
    if (e.status === 403) {
      return `${e.message}: the plugin's token lacks the role ${neededRole(e) ?? 'this needs'}` +
        ' (the plugin needs a token of role report, and admin for the commands that change the assignment)'
    }
    if (e.status === 404) return `${e.message}: check endpoint, and that the service's config enables sources.http`
    return e.message
  }
  if (e instanceof Error) return e.message
  return String(e)
}

/** Node's codes for a certificate signed by no CA it trusts. */
const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED', 'CERT_REJECTED',
])

/** A short reason from fetch()'s error (undici hides the useful part in `cause`). @param {any} e */
function networkReason(e) {
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'timed out'
  const cause = e?.cause ?? e
  const message = cause?.message || e?.message || String(e)
  const code = typeof cause?.code === 'string' ? cause.code : ''
  const reason = code && !message.includes(code) ? `${message} (${code})` : message
  if (UNTRUSTED.has(code)) {
    return `the service's TLS certificate is not trusted: ${reason}; set the plugin's caFile to the CA that signed the service's api.tls certificate`
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return `the service's TLS certificate does not name the endpoint's host: ${reason}; its subjectAltName must hold the host or IP of endpoint`
  }
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return `the service's TLS certificate is not valid now: ${reason}`
  if (code === 'EPROTO' || /wrong version number|packet length too long/i.test(message)) {
    return `${reason}: is the endpoint's scheme right? https:// for a service with api.tls, http:// without`
  }
  return reason
}

/**
 * The CA the plugin trusts for an https:// endpoint, as the `caFile` option gives it: PEM text
 * (it contains `-----BEGIN CERTIFICATE-----`), or the path of a PEM file, relative to `baseDir`
 * (Koishi's instance directory). Null for ''. Throws, naming the file, when it cannot be read or
 * holds no certificate.
 * @param {string} value @param {string} baseDir @returns {string | null}
 */
function loadCa(value, baseDir) {
  const given = String(value ?? '').trim()
  if (!given) return null
  const inline = given.includes('-----BEGIN CERTIFICATE-----')
  const where = inline ? 'caFile (PEM text)' : `caFile ${resolve(baseDir, given)}`
  let pem = given
  if (!inline) {
    try {
      pem = readFileSync(resolve(baseDir, given), 'utf8')
    } catch (e) {
      throw new Error(`${where}: cannot read it: ${/** @type {any} */ (e)?.message ?? e}`)
    }
  }
  try {
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error('no -----BEGIN CERTIFICATE----- block')
    // eslint-disable-next-line no-new
    new X509Certificate(pem)
  } catch (e) {
    throw new Error(`${where}: not a PEM certificate: ${/** @type {any} */ (e)?.message ?? e}`)
  }
  return pem
}

/**
 * A `fetch` that trusts `ca` (PEM) besides Node's built-in roots, on node:https (the global
 * fetch cannot be given a CA without the undici package). Answers a `Response` as fetch does,
 * its body streamed (the assignment stream); fails as fetch does: a TypeError whose `cause` is
 * the socket's or TLS's error, or the signal's AbortError.
 * @param {string} ca @returns {Fetch}
 */
function caFetch(ca) {
  const agents = {
    'https:': new https.Agent({ keepAlive: true, ca: [...rootCertificates, ca] }),
    'http:': new http.Agent({ keepAlive: true }),
  }
  return (url, init) => new Promise((done, fail) => {
    const target = new URL(url)
    const agent = target.protocol === 'https:' ? agents['https:'] : target.protocol === 'http:' ? agents['http:'] : null
    if (!agent) return fail(new TypeError(`fetch failed: unsupported protocol ${target.protocol}`))
    const body = init.body === undefined ? undefined : Buffer.from(init.body)
    /** @type {Record<string, string>} */
    const headers = { ...init.headers }
    if (body) headers['content-length'] = String(body.length)
    const send = target.protocol === 'https:' ? https.request : http.request
    const req = send(target, { method: init.method ?? 'GET', headers, agent, signal: init.signal }, (res) => {
      const status = res.statusCode ?? 0
      const out = new Headers()
      for (const [k, v] of Object.entries(res.headers)) {
        for (const x of Array.isArray(v) ? v : v === undefined ? [] : [v]) out.append(k, x)
      }
      // a Response of these statuses has no body
      const empty = status === 204 || status === 205 || status === 304
      if (empty) res.resume()
      done(new Response(empty ? null : /** @type {any} */ (Readable.toWeb(res)), { status, statusText: res.statusMessage, headers: out }))
    })
    req.on('error', (e) => fail(e?.name === 'AbortError' ? e : Object.assign(new TypeError('fetch failed'), { cause: e })))
    req.end(body)
  })
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
    res = await (options.fetch ?? fetch)(url(options.endpoint, path), {
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
  /** @type {any} */
  let json = null
  try {
    json = text ? JSON.parse(text) : null
  } catch {}
  if (!res.ok) {
    const detail = typeof json?.error === 'string' ? json.error : text.slice(0, 200)
    throw new HttpError(method, path, res.status, detail, json)
  }
  return json
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
  Once, HttpError, NetworkError, isOutage, isForbidden, neededRole, describe, networkReason, loadCa, caFetch,
  backoff, Sleeper, Link, request, headers, url, SseParser,
}
