// @ts-check
'use strict'
// HTTPS (`api.tls`) and token roles (`api.tokens`), with the real service and a real Koishi 4.18:
// a CA made for the test with `openssl`, and the service's certificate for 127.0.0.1 signed by
// it. The service has its admin `api.token` and two more tokens: `koishi` (role report) and
// `viewer` (role read). Runs in order.
//
//   * the plugin on https:// trusting that CA (`caFile`, a path), with the report token: it
//     reports, follows the stream (its rows are the service's assignment) and answers commands;
//   * with that token the changing commands and plugin-admin's `assign` are refused as the
//     token lacking the admin role, in words (zh, en), and nothing changes;
//   * `caFile` as PEM text, with the read token: trusted; the 403 is logged naming the role;
//   * a CA that did not sign the service's certificate, or none: refused, one clear log line,
//     and a command says so;
//   * a `caFile` that cannot be read: the plugin does not start, and the error names the file.
//
//   bots 1001, 1002: groups 1-4

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const admin = require('@koishijs/plugin-admin')
const plugin = require('../src')
const zh = require('../locales/zh-CN.json')
const en = require('../locales/en-US.json')
const { createKoishi, captureLogs, waitFor, oneBot, fill, PLATFORM } = require('./support/koishi')
const { Service, freePort } = require('./support/service')

const G = (/** @type {number} */ i) => String(800000 + i)
const GROUPS = [1, 2, 3, 4].map(G)
const REPORT_TOKEN = 'report-secret-of-koishi'
const READ_TOKEN = 'read-secret-of-viewer'

/** @type {string} */ let dir
/** @type {{ ca: string, otherCa: string, cert: string, key: string }} */ let files
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs
/** @type {Awaited<ReturnType<typeof createKoishi>>[]} */ const others = []

const pluginLines = (/** @type {RegExp} */ re) => logs.records.filter(r => r.name === 'auto-assign' && re.test(r.content))

/** @param {string[]} args */
function openssl(args) {
  try {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (e) {
    const err = /** @type {any} */ (e)
    if (err.code === 'ENOENT') throw new Error('this test makes its certificates with the openssl command line tool: install openssl (apt-get install openssl)')
    throw new Error(`openssl ${args.join(' ')} failed: ${err.stderr ?? err.message}`)
  }
}

/**
 * A CA, a certificate for 127.0.0.1 (IP SAN) signed by it, and another CA, in `dir`.
 * @returns {{ ca: string, otherCa: string, cert: string, key: string }}
 */
function makeCertificates() {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']
  const caExt = ['-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=auto-assign test CA', ...caExt])
  openssl(['req', '-x509', ...ec, '-keyout', 'other-ca.key', '-out', 'other-ca.pem', '-days', '2', '-subj', '/CN=another CA', ...caExt])
  openssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1'])
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n')
  openssl(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'server.ext'])
  return { ca: join(dir, 'ca.pem'), otherCa: join(dir, 'other-ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') }
}

/** Another Koishi in its own directory, with one bot in group 9 (stopped after the tests). @param {string} name @param {object} config */
async function another(name, config) {
  const home = join(dir, name)
  mkdirSync(home)
  const k = await createKoishi({
    dir: home,
    bots: [{ selfId: '3001', guilds: [G(9)] }],
    plugin,
    pluginConfig: { endpoint: service.endpoint, reporter: name, retryMin: 100, retryMax: 500, requestTimeout: 2000, messageReportInterval: 0, ...config },
  })
  others.push(k)
  return k
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-tls-'))
  files = makeCertificates()
  service = new Service({
    dir,
    port: await freePort(),
    tls: { certFile: files.cert, keyFile: files.key, ca: readFileSync(files.ca, 'utf8') },
    tokens: [{ name: 'koishi', token: REPORT_TOKEN, role: 'report' }, { name: 'viewer', token: READ_TOKEN, role: 'read' }],
  })
  await service.start()
  logs = captureLogs()
  koishi = await createKoishi({
    dir,
    bots: ['1001', '1002'].map(selfId => ({ selfId, guilds: GROUPS })),
    plugin,
    pluginConfig: {
      endpoint: service.endpoint, token: REPORT_TOKEN, caFile: files.ca, reporter: 'koishi-tls',
      heartbeatInterval: 1000, retryMin: 100, retryMax: 500, requestTimeout: 3000, messageReportInterval: 0,
    },
    before: [[admin, {}]],
  })
  const db = koishi.app.database
  await db.createUser(PLATFORM, 'admin', { authority: 4 })
  await db.createUser(PLATFORM, 'admin-en', { authority: 4, locales: ['en-US'] })
})

after(async () => {
  for (const k of others) await k.stop()
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('over HTTPS, trusting the CA of caFile, with a token of role report: it reports, follows the stream and answers commands', async () => {
  assert.match(service.endpoint, /^https:\/\/127\.0\.0\.1:\d+$/)
  // the rows are the service's assignment: reported, planned, and followed over HTTPS
  const assignment = await waitFor(async () => {
    const a = await service.assignments()
    if (!GROUPS.every(g => a[g])) return null
    const rows = Object.fromEntries((await koishi.rows()).map(r => [r.id, r.assignee]))
    return GROUPS.every(g => rows[g] === a[g]) ? a : null
  }, 10000, 'every group assigned and written')
  assert.ok(pluginLines(/following the auto-assign service at https:\/\/.* as reporter koishi-tls \(trusting the CA of caFile\)/).length)
  // the stream names the reporter: the service counts it as the reporter's sign of life
  const { body } = await service.api('GET', '/v1/bots')
  assert.ok(JSON.stringify(body).includes('1001'), JSON.stringify(body))

  const g = GROUPS[0]
  const status = oneBot(await koishi.ask(g, 'admin', '分配.状态'))
  assert.equal(status.bot, assignment[g])
  assert.equal(status.texts[0].split('\n')[0], fill(zh.commands['auto-assign.status'].messages.reachable, { endpoint: service.endpoint }))
  const explain = oneBot(await koishi.ask(g, 'admin-en', 'auto-assign.explain'))
  assert.equal(explain.texts[0].split('\n')[0], fill(en.commands['auto-assign.explain'].messages.assigned, { channel: g, bot: assignment[g] }))
  assert.equal(pluginLines(/unavailable/).length, 0)
})

test('a token of role report: the changing commands and assign are refused as lacking the admin role, in words; nothing changes', async () => {
  const a = await service.assignments()
  const [g1, g2] = GROUPS
  const other = a[g1] === '1001' ? '1002' : '1001'
  const zhForbidden = fill(zh['auto-assign'].refusal.forbidden, { role: 'admin' })
  const enForbidden = fill(en['auto-assign'].refusal.forbidden, { role: 'admin' })
  assert.deepEqual(oneBot(await koishi.ask(g1, 'admin', `分配.固定 ${other}`)).texts, [zhForbidden])
  assert.deepEqual(oneBot(await koishi.ask(g1, 'admin-en', 'auto-assign.hold')).texts, [enForbidden])
  assert.deepEqual(oneBot(await koishi.ask(g1, 'admin', `分配.排空 ${other}`)).texts, [zhForbidden])
  assert.deepEqual(oneBot(await koishi.ask(g1, 'admin-en', 'auto-assign.rebalance')).texts, [enForbidden])
  // plugin-admin's assign: it would be undone at the next message, so it does not run
  const r = oneBot(await koishi.ask(g2, 'admin', `assign <at id="${a[g2] === '1001' ? '1002' : '1001'}"/>`))
  assert.deepEqual(r.texts, [fill(zh['auto-assign'].assign.forbidden, { channel: g2 })])
  assert.ok(pluginLines(/assign onebot:\S+ to \d+ refused by the service: .*HTTP 403 .*lacks the role admin/).length, 'logged')
  // nothing changed: no pin, no drain, the same assignment, the same rows
  assert.deepEqual((await service.api('GET', '/v1/pins')).body.pins, [])
  assert.deepEqual((await service.api('GET', '/v1/drains')).body.drains, [])
  assert.deepEqual(await service.assignments(), a)
  const rows = Object.fromEntries((await koishi.rows()).map(x => [x.id, x.assignee]))
  for (const g of GROUPS) assert.equal(rows[g], a[g])
  // the reading commands need no more than report
  assert.deepEqual(oneBot(await koishi.ask(g1, 'admin', '分配.固定列表')).texts, [zh.commands['auto-assign.pins'].messages.none])
})

test('caFile as PEM text, a token of role read: the certificate is trusted, and the 403 is logged naming the role', async () => {
  const before = pluginLines(/HTTP 403/).length
  await another('koishi-read', { token: READ_TOKEN, caFile: readFileSync(files.ca, 'utf8') })
  const [line] = await waitFor(() => {
    const l = pluginLines(/HTTP 403/)
    return l.length > before ? l.slice(before) : null
  }, 5000, 'the 403 logged')
  assert.match(line.content, /the token of viewer has the role read; this needs report.*the plugin's token lacks the role report/)
  assert.doesNotMatch(line.content, /certificate/)
})

test('a certificate of another CA, or no caFile: refused with one clear log line; a command says so', async () => {
  for (const [name, caFile] of [['koishi-other-ca', files.otherCa], ['koishi-no-ca', '']]) {
    const before = pluginLines(/TLS certificate is not trusted/).length
    const k = await another(name, { token: REPORT_TOKEN, caFile })
    const [line] = await waitFor(() => {
      const l = pluginLines(/TLS certificate is not trusted/)
      return l.length > before ? l.slice(before) : null
    }, 5000, `${name}: the refusal logged`)
    assert.match(line.content, new RegExp(`^service at ${service.endpoint.replace(/\./g, '\\.')} unavailable: the service's TLS certificate is not trusted: .*\\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)\\); set the plugin's caFile to the CA that signed the service's api.tls certificate`))
    // a command, in words
    const r = oneBot(await k.ask(G(9), 'u9', '<at id="3001"/> 分配.状态'))
    assert.match(r.texts[0], /^无法连接 auto-assign 服务（https:\/\/127\.0\.0\.1:\d+）：the service's TLS certificate is not trusted/)
    // the service never heard of it (its bot is unknown to it)
    const { body } = await service.api('GET', '/v1/bots')
    assert.ok(!JSON.stringify(body).includes('3001'), JSON.stringify(body))
  }
  // retries do not repeat the line (one per outage)
  assert.equal(pluginLines(/TLS certificate is not trusted/).length, 2)
})

test('a caFile that cannot be read: the plugin does not start, and the error names the file', async () => {
  const missing = join(dir, 'no-such-ca.pem')
  const before = logs.records.length
  await another('koishi-missing-ca', { token: REPORT_TOKEN, caFile: missing })
  const record = logs.records.slice(before).find(r => r.content.includes(`caFile ${missing}: cannot read it`))
  assert.ok(record, JSON.stringify(logs.records.slice(before).map(r => r.content)))
  assert.equal(record.type, 'error')
  assert.equal(pluginLines(/as reporter koishi-missing-ca/).length, 0, 'it did not start')
})
