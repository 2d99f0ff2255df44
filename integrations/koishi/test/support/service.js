// @ts-check
'use strict'
// The real auto-assign service binary as a child process, on a free loopback port.

const { spawn } = require('node:child_process')
const { existsSync, writeFileSync } = require('node:fs')
const { createServer } = require('node:net')
const { join, resolve } = require('node:path')
const { caFetch } = require('../../src/client')

const BIN = process.env.AUTO_ASSIGN_BIN || resolve(__dirname, '../../../../target/release/auto-assign')
const TOKEN = 'test-secret'

/** A free TCP port on 127.0.0.1 (the service does not print the port it got for bind :0). */
function freePort() {
  return new Promise((res, rej) => {
    const server = createServer()
    server.unref()
    server.on('error', rej)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => res(port))
    })
  })
}

class Service {
  /**
   * `triggerDelays`: the delays written to config.yaml, each 0 unless given; `null` writes no
   * `triggerDelays` key (the service's defaults). `enabledPlatforms`: `null` writes no key (the
   * default, `[onebot]`). `database`: the service's `database.url`. `extra`: more config lines.
   * `streamGrace`: `sources.http.streamGrace` (none: the service's default, 0.5 s). `tls`: the
   * API on HTTPS (`api.tls`) with this certificate and key; `ca` (PEM) is what this helper
   * trusts for it. `tokens`: `api.tokens` besides the admin `api.token` (TOKEN).
   * @param {{ dir: string, port: number, triggerDelays?: Record<string, number> | null, startupWait?: number,
   *   offlineGrace?: number, streamGrace?: number, database?: string, enabledPlatforms?: string[] | null, extra?: string[],
   *   tls?: { certFile: string, keyFile: string, ca: string }, tokens?: { name: string, token: string, role: string }[] }} opts
   */
  constructor({ dir, port, triggerDelays = {}, startupWait = 0, offlineGrace = 30, streamGrace, database = 'sqlite://state.db', enabledPlatforms = [], extra = [], tls, tokens = [] }) {
    if (!existsSync(BIN)) {
      throw new Error(`no service binary at ${BIN}: run \`cargo build --release\` in the repository root, or set AUTO_ASSIGN_BIN`)
    }
    this.dir = dir
    this.port = port
    this.tls = tls
    this.tokens = tokens
    this.streamGrace = streamGrace
    this.endpoint = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`
    /** how this helper talks to it (trusting `tls.ca`) @type {import('../../src/client').Fetch} */
    this.fetch = tls ? caFetch(tls.ca) : (url, init) => fetch(url, init)
    this.triggerDelays = triggerDelays && { startup: 0, botOnline: 0, botOffline: 0, botStatus: 0, channelJoined: 0, channelLeft: 0, ...triggerDelays }
    this.database = database
    this.enabledPlatforms = enabledPlatforms
    this.extra = extra
    this.config = join(dir, 'config.yaml')
    this.configure({ startupWait, offlineGrace })
    /** every line the service printed, over all its runs @type {string[]} */
    this.log = []
    /** @type {import('node:child_process').ChildProcess | null} */
    this.child = null
    this.starts = 0
  }

  /** (Re)writes config.yaml; takes effect at the next start. @param {{ startupWait?: number, offlineGrace?: number }} opts */
  configure({ startupWait = 0, offlineGrace = 30 }) {
    const delays = this.triggerDelays && Object.entries(this.triggerDelays).map(([k, v]) => `${k}: ${v}`).join(', ')
    const api = [`bind: "127.0.0.1:${this.port}"`, `token: ${TOKEN}`]
    if (this.tokens.length) api.push(`tokens: ${JSON.stringify(this.tokens)}`)
    if (this.tls) api.push(`tls: ${JSON.stringify({ certFile: this.tls.certFile, keyFile: this.tls.keyFile })}`)
    const http = [`startupWait: ${startupWait}`, `offlineGrace: ${offlineGrace}`]
    if (this.streamGrace !== undefined) http.push(`streamGrace: ${this.streamGrace}`)
    writeFileSync(this.config, [
      `api: {${api.join(', ')}}`,
      `sources:`,
      `  http: {${http.join(', ')}}`,
      ...(delays ? [`triggerDelays: {${delays}}`] : []),
      `database: {url: ${JSON.stringify(this.database)}}`,
      ...(this.enabledPlatforms ? [`enabledPlatforms: ${JSON.stringify(this.enabledPlatforms)}`] : []),
      ...this.extra,
      '',
    ].join('\n'))
  }

  async start() {
    const child = spawn(BIN, ['serve', '--config', this.config], { cwd: this.dir, stdio: ['ignore', 'pipe', 'pipe'] })
    this.child = child
    this.starts++
    const run = this.starts
    const collect = (/** @type {Buffer} */ chunk) => {
      for (const line of chunk.toString().split('\n')) {
        if (!line) continue
        this.log.push(`[run ${run}] ${line}`)
        if (process.env.SERVICE_LOG) console.log(`[service ${run}] ${line}`)
      }
    }
    child.stdout?.on('data', collect)
    child.stderr?.on('data', collect)
    const exited = new Promise(res => child.once('exit', res))
    const deadline = Date.now() + 15000
    for (;;) {
      if (child.exitCode !== null) throw new Error('the service exited at start:\n' + this.log.slice(-20).join('\n'))
      try {
        const res = await this.fetch(this.endpoint + '/healthz', {})
        if (res.ok) break
      } catch {}
      if (Date.now() > deadline) throw new Error('the service did not answer /healthz within 15 s')
      await new Promise(r => setTimeout(r, 25))
    }
    this.exited = exited
  }

  /** @param {NodeJS.Signals} [signal] */
  async stop(signal = 'SIGTERM') {
    const child = this.child
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise(res => child.once('exit', res))
    child.kill(signal)
    const timer = setTimeout(() => child.kill('SIGKILL'), 8000)
    await exited
    clearTimeout(timer)
    this.child = null
  }

  /** @param {string} method @param {string} path @param {unknown} [body] @param {string} [token] */
  async api(method, path, body, token = TOKEN) {
    /** @type {Record<string, string>} */
    const headers = { authorization: 'Bearer ' + token }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await this.fetch(this.endpoint + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : null }
  }

  /** The service's assignment of one platform: channel → bot. @param {string} [platform] */
  async assignments(platform = 'onebot') {
    const { status, body } = await this.api('GET', '/v1/assignments')
    if (status !== 200) throw new Error('GET /v1/assignments: ' + status)
    return /** @type {Record<string, string>} */ (body[platform] ?? {})
  }

  /** @param {RegExp} re */
  count(re) {
    return this.log.filter(l => re.test(l)).length
  }
}

module.exports = { Service, freePort, BIN, TOKEN }
