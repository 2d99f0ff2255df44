// @ts-check
'use strict'
// The pure parts: the SSE parser, the backoff, error classification, the default reporter name,
// the message counter.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { mkdtempSync, rmSync, writeFileSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { rootCertificates } = require('node:tls')
const { join } = require('node:path')
const { SseParser, backoff, isOutage, describe, networkReason, loadCa, HttpError, NetworkError } = require('../src/client')
const { isUnique } = require('../src/applier')
const { defaultReporter, Config } = require('../src')
const { MessageCounter, normalize, validChannel, WINDOW, TIME_TOLERANCE, MAX_COUNT } = require('../src/messages')

test('SSE: events, multi-line data, comments, CRLF, any chunking', () => {
  const text = ': keep-alive\n\nevent: snapshot\ndata: {"version":3,\ndata: "assignments":{}}\n\n'
    + ':\r\nevent: changes\r\ndata: {"version":4}\r\n\r\ndata: plain\n\n'
  const expected = [
    ['snapshot', '{"version":3,\n"assignments":{}}'],
    ['changes', '{"version":4}'],
    ['message', 'plain'],
  ]
  for (const size of [1, 2, 3, 7, text.length]) {
    /** @type {string[][]} */
    const got = []
    const parser = new SseParser((event, data) => got.push([event, data]))
    for (let i = 0; i < text.length; i += size) parser.push(text.slice(i, i + size))
    assert.deepEqual(got, expected, `chunks of ${size}`)
  }
})

test('backoff: 1 s doubling to 30 s, up to 25 % jitter below', () => {
  const lo = (/** @type {number} */ n) => backoff(n, 1000, 30000, () => 1)
  const hi = (/** @type {number} */ n) => backoff(n, 1000, 30000, () => 0)
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 50].map(hi), [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
  assert.deepEqual([0, 1, 5].map(lo), [750, 1500, 22500])
})

test('outages vs refusals; UNIQUE errors of every driver', () => {
  assert.ok(isOutage(new NetworkError('ECONNREFUSED')))
  assert.ok(isOutage(new HttpError('GET', '/', 503, '')))
  assert.ok(isOutage(new HttpError('GET', '/', 401, '')))
  assert.ok(!isOutage(new HttpError('PUT', '/', 400, 'bots[0].id: missing field')))
  assert.ok(!isOutage(new HttpError('POST', '/', 409, '')))
  assert.ok(isUnique(new Error('UNIQUE constraint failed: channel.id, channel.platform')))
  assert.ok(isUnique(new Error("Duplicate entry '1-onebot' for key 'PRIMARY'")))
  assert.ok(isUnique(new Error('duplicate key value violates unique constraint "channel_pkey"')))
  assert.ok(!isUnique(new Error('disk I/O error')))
})

test('default reporter name: valid for the service, stable per directory, distinct across directories', () => {
  const a = defaultReporter('/srv/koishi-a')
  assert.match(a, /^[A-Za-z0-9_.:-]+$/)
  assert.equal(a, defaultReporter('/srv/koishi-a'))
  assert.notEqual(a, defaultReporter('/srv/koishi-b'))
})

test('config schema: defaults, and a bad reporter name is refused', () => {
  const c = Config({})
  assert.equal(c.endpoint, 'http://127.0.0.1:8787')
  assert.equal(c.heartbeatInterval, 10000)
  assert.equal(c.batchSize, 100)
  assert.equal(c.retryMin, 1000)
  assert.equal(c.retryMax, 30000)
  assert.throws(() => Config({ reporter: 'a b' }))
})

test('config schema: messageReportInterval defaults to 10 s, 0 turns it off, negative is refused', () => {
  assert.equal(Config({}).messageReportInterval, 10)
  assert.equal(Config({ messageReportInterval: 0 }).messageReportInterval, 0)
  assert.equal(Config({ messageReportInterval: 2.5 }).messageReportInterval, 2.5)
  assert.throws(() => Config({ messageReportInterval: -1 }))
})

test('message counter: copies of one message counted once, identical messages each, windows and caps', () => {
  let now = 1_000_000
  const c = new MessageCounter({ now: () => now, maxRecent: 100, maxChannels: 3 })
  // two bots, the same message (OneBot: the same time; message ids would differ): one message
  assert.equal(c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000), true) // the first pending count
  assert.equal(c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000), false)
  // a user repeating the same text in the same second: each bot's copies count once per message
  c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'A', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000)
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000)
  // per-account attributes (image URL, quoted message id) and whitespace do not matter
  c.seen('onebot', 'g1', 'A', 'u', 'a  <img src="x?rkey=A"/>', 6000)
  c.seen('onebot', 'g1', 'B', 'u', 'a <img src="x?rkey=B"/>', 6000)
  // another sender, channel or platform is another message
  c.seen('onebot', 'g1', 'A', 'v', 'hi', 5000)
  c.seen('onebot', 'g2', 'A', 'u', 'hi', 5000)
  c.seen('other', 'g1', 'A', 'u', 'hi', 5000)
  // the same text much later (past the time tolerance) is a new message
  c.seen('onebot', 'g1', 'B', 'u', 'hi', 5000 + TIME_TOLERANCE + 1)
  assert.equal(c.size, 3)
  let taken = /** @type {NonNullable<ReturnType<typeof c.take>>} */ (c.take())
  assert.deepEqual(MessageCounter.events(taken), [
    { type: 'messages', platform: 'onebot', counts: Object.assign(Object.create(null), { g1: 6, g2: 1 }) },
    { type: 'messages', platform: 'other', counts: Object.assign(Object.create(null), { g1: 1 }) },
  ])
  assert.equal(c.take(), null)

  // a late copy within the window is still recognised; after the window it is counted
  c.seen('onebot', 'g1', 'A', 'u', 'later', 9000)
  now += WINDOW - 1
  assert.equal(c.seen('onebot', 'g1', 'B', 'u', 'later', 9000), false)
  now += 2
  c.seen('onebot', 'g1', 'C', 'u', 'later', 9000)
  assert.equal(/** @type {any} */ (c.take()).get('onebot').get('g1'), 2)
  assert.equal(c.remembered, 1)

  // restore: counts of a failed report come back, added to those made since
  c.seen('onebot', 'g1', 'A', 'w', 'x', 1)
  taken = /** @type {any} */ (c.take())
  c.seen('onebot', 'g1', 'A', 'w', 'y', 1)
  c.seen('onebot', 'g3', 'A', 'w', 'y', 1)
  c.restore(taken)
  assert.deepEqual([...(/** @type {any} */ (c.take())).get('onebot')], [['g1', 2], ['g3', 1]])

  // at most maxChannels channels pending: the rest is dropped and counted as dropped
  for (const g of ['a', 'b', 'c', 'd', 'e']) c.seen('onebot', g, 'A', 'w', 'z', 1)
  assert.equal(c.size, 3)
  assert.equal(c.dropped, 2)
  // at most maxRecent messages remembered
  for (let i = 0; i < 500; i++) c.seen('onebot', 'a', 'A', 'w', 'n' + i, 1)
  assert.ok(c.remembered <= 100)
  assert.equal(c.recent.size, c.remembered)
  // a channel's count stops at what the service accepts in one report
  c.add('onebot', 'a', MAX_COUNT)
  assert.equal(/** @type {any} */ (c.take()).get('onebot').get('a'), MAX_COUNT)
})

test('message counter: content normalisation and channel ids', () => {
  assert.equal(normalize(' a\n b <at id="1" name="x"/> <img src="u"/><quote id="9">q</quote> '), 'a b <at/> <img/><quote>q</quote>')
  assert.equal(normalize('1 &lt; 2'), '1 &lt; 2')
  assert.ok(validChannel('123456'))
  assert.ok(!validChannel(''))
  assert.ok(!validChannel('x'.repeat(256)))
  assert.ok(validChannel('é'.repeat(127)))
  assert.ok(!validChannel('é'.repeat(128)))
  assert.ok(!validChannel('a\nb'))
})

test('operator: a bot as commands name it; the leader a follower names; the author of a change', () => {
  const { parseBot, leaderOf, isFollower, authorNote } = require('../src/operator')
  assert.equal(parseBot('1002', 'onebot'), '1002')
  assert.equal(parseBot(' onebot:1002 ', 'onebot'), '1002')
  assert.equal(parseBot('<at id="1002"/>', 'onebot'), '1002')
  assert.equal(parseBot('<at id="1002" name="bot"/>', 'onebot'), '1002')
  assert.equal(parseBot('telegram:5', 'onebot'), null)
  assert.equal(parseBot('', 'onebot'), null)
  assert.equal(parseBot(undefined, 'onebot'), null)
  assert.equal(parseBot('a b', 'onebot'), null)
  const follower = new HttpError('PUT', '/v1/pins/onebot/1', 409, 'this instance follows', { error: 'x', leader: { instance: 'a', api: 'http://10.0.0.5:8787' } })
  assert.equal(leaderOf(follower), 'http://10.0.0.5:8787')
  assert.ok(isFollower(follower))
  const unknown = new HttpError('PUT', '/', 409, 'this instance follows', { error: 'x', leader: { instance: null, api: null } })
  assert.equal(leaderOf(unknown), null)
  assert.ok(isFollower(unknown))
  const member = new HttpError('PUT', '/', 409, '1003 is not in onebot:1; its members: 1001, 1002', { error: '…' })
  assert.equal(leaderOf(member), null)
  assert.ok(!isFollower(member))
  const session = /** @type {any} */ ({ platform: 'onebot', userId: '42', username: 'Alice' })
  assert.equal(authorNote(session, undefined), 'by onebot:42 (Alice) via Koishi')
  assert.equal(authorNote(session, ' VIP '), 'VIP (by onebot:42 (Alice) via Koishi)')
  assert.equal(authorNote({ ...session, username: '42' }, ''), 'by onebot:42 via Koishi')
})

test('operator: the service\'s refusals, each in words with what the command was about', () => {
  const { refusal } = require('../src/operator')
  /** @type {any[]} */
  const said = []
  const session = /** @type {any} */ ({ text: (/** @type {string} */ key, /** @type {any} */ params) => { said.push([key, params]); return key === 'auto-assign.separator' ? ', ' : key } })
  const e = (/** @type {number} */ status, /** @type {string} */ detail, body = {}) => new HttpError('PUT', '/', status, detail, body)
  const about = { platform: 'onebot', channel: '100', bot: '1003', until: 'soon' }
  assert.equal(refusal(session, e(404, 'unknown platform "telegram" (known: onebot)'), about), 'auto-assign.refusal.unknown-platform')
  assert.equal(refusal(session, e(404, 'no bot of the fleet reported being in onebot:100'), about), 'auto-assign.refusal.unknown-group')
  assert.equal(refusal(session, e(404, 'no bot onebot:1003 is known'), about), 'auto-assign.refusal.unknown-bot')
  assert.equal(refusal(session, e(404, 'onebot:100 has no pin'), about), 'auto-assign.refusal.not-pinned')
  assert.equal(refusal(session, e(404, 'onebot:1003 has no drain'), about), 'auto-assign.refusal.not-drained')
  said.length = 0
  assert.equal(refusal(session, e(409, '1003 is not in onebot:100; its members: 1001, 1002'), about), 'auto-assign.refusal.not-member')
  assert.deepEqual(said.at(-1), ['auto-assign.refusal.not-member', { bot: '1003', channel: '100', members: '1001, 1002' }])
  assert.equal(refusal(session, e(409, '1003 is not in onebot:100; its members: '), about), 'auto-assign.refusal.not-member')
  assert.equal(said.at(-1)[1].members, 'auto-assign.refusal.no-members')
  assert.equal(refusal(session, e(409, 'this instance follows', { leader: { api: null } }), about), 'auto-assign.refusal.follower')
  assert.equal(refusal(session, e(400, 'until: "soon" is neither …'), about), 'auto-assign.refusal.bad-until')
  assert.equal(refusal(session, e(400, 'note: longer than 500 characters'), about), 'auto-assign.refusal.bad-note')
  assert.equal(refusal(session, e(400, 'bot: empty'), about), 'auto-assign.refusal.bad-bot')
  assert.equal(refusal(session, e(400, 'something else'), about), null)
  assert.equal(refusal(session, new NetworkError('ECONNREFUSED'), about), null)
})

test('operator: refusals by their stable code, before the text (which may change); 403 in words, naming the role', () => {
  const { refusal, failure, isFollower } = require('../src/operator')
  /** @type {any[]} */
  const said = []
  const session = /** @type {any} */ ({ text: (/** @type {string} */ key, /** @type {any} */ params) => { said.push([key, params]); return key === 'auto-assign.separator' ? ', ' : key } })
  /** @param {number} status @param {string} path @param {string} code @param {object} [more] */
  const e = (status, path, code, more = {}) => new HttpError('PUT', path, status, 'reworded by a newer service', { error: 'reworded by a newer service', code, ...more })
  const pin = '/v1/pins/onebot/100'
  const drain = '/v1/drains/onebot/1003'
  const about = { platform: 'onebot', channel: '100', bot: '1003', until: 'soon' }
  assert.equal(refusal(session, e(404, pin, 'unknown_platform'), about), 'auto-assign.refusal.unknown-platform')
  assert.equal(refusal(session, e(404, pin, 'unknown_channel'), about), 'auto-assign.refusal.unknown-group')
  assert.equal(refusal(session, e(404, pin, 'unknown_bot'), about), 'auto-assign.refusal.unknown-bot')
  assert.equal(refusal(session, e(404, pin, 'nothing_to_end'), about), 'auto-assign.refusal.not-pinned')
  assert.equal(refusal(session, e(404, drain, 'nothing_to_end'), about), 'auto-assign.refusal.not-drained')
  said.length = 0
  assert.equal(refusal(session, e(409, pin, 'not_a_member', { members: ['1001', '1002'] }), about), 'auto-assign.refusal.not-member')
  assert.deepEqual(said.at(-1), ['auto-assign.refusal.not-member', { bot: '1003', channel: '100', members: '1001, 1002' }])
  assert.equal(refusal(session, e(409, pin, 'not_a_member', { members: [] }), about), 'auto-assign.refusal.not-member')
  assert.equal(said.at(-1)[1].members, 'auto-assign.refusal.no-members')
  assert.ok(isFollower(e(409, pin, 'following')))
  assert.equal(refusal(session, e(409, pin, 'following'), about), 'auto-assign.refusal.follower')
  assert.equal(refusal(session, e(400, pin, 'invalid_until'), about), 'auto-assign.refusal.bad-until')
  assert.equal(refusal(session, e(400, pin, 'invalid_note'), about), 'auto-assign.refusal.bad-note')
  assert.equal(refusal(session, e(400, pin, 'invalid_bot'), about), 'auto-assign.refusal.bad-bot')
  // a code this plugin does not know: not read by its text either
  assert.equal(refusal(session, e(404, pin, 'something_new'), about), null)
  // 403: the token's role, as the service names it
  const forbidden = new HttpError('PUT', pin, 403, 'the token of koishi has the role report; this needs admin', { code: 'forbidden' })
  assert.equal(refusal(session, forbidden, about), 'auto-assign.refusal.forbidden')
  assert.deepEqual(said.at(-1), ['auto-assign.refusal.forbidden', { role: 'admin' }])
  assert.equal(failure(session, 'https://x', forbidden), 'auto-assign.refusal.forbidden')
  assert.equal(failure(session, 'https://x', new HttpError('GET', '/', 403, '')), 'auto-assign.refusal.forbidden')
  assert.deepEqual(said.at(-1), ['auto-assign.refusal.forbidden', { role: 'admin' }])
  assert.equal(failure(session, 'https://x', new HttpError('GET', '/', 401, '')), 'auto-assign.unauthorized')
  assert.match(describe(forbidden), /HTTP 403 .*: the plugin's token lacks the role admin/)
  assert.equal(forbidden.code, 'forbidden')
})

test('client: caFile as PEM text or a file (relative to Koishi\'s directory); a bad one named; TLS refusals explained', () => {
  const dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-ca-'))
  try {
    // a real certificate (Node's own roots are PEM)
    const pem = rootCertificates[0]
    writeFileSync(join(dir, 'ca.pem'), pem)
    writeFileSync(join(dir, 'not.pem'), 'hello')
    assert.equal(loadCa('', dir), null)
    assert.equal(loadCa('  ', dir), null)
    assert.equal(loadCa(pem, '/nowhere'), pem.trim())
    assert.equal(loadCa('ca.pem', dir), pem)
    assert.equal(loadCa(join(dir, 'ca.pem'), '/elsewhere'), pem)
    assert.throws(() => loadCa('missing.pem', dir), new RegExp(`^Error: caFile ${join(dir, 'missing.pem')}: cannot read it: ENOENT`))
    assert.throws(() => loadCa('not.pem', dir), /caFile .*not\.pem: not a PEM certificate/)
    assert.throws(() => loadCa('-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----', dir), /caFile \(PEM text\): not a PEM certificate/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  const tls = Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error('unable to verify the first certificate'), { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }) })
  assert.equal(networkReason(tls), "the service's TLS certificate is not trusted: unable to verify the first certificate (UNABLE_TO_VERIFY_LEAF_SIGNATURE); set the plugin's caFile to the CA that signed the service's api.tls certificate")
  const refused = Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }) })
  assert.equal(networkReason(refused), 'connect ECONNREFUSED 127.0.0.1:1')
})

test('applier: the stream names the reporter', () => {
  const { Applier } = require('../src/applier')
  const ctx = /** @type {any} */ ({ logger: () => ({}) })
  const link = /** @type {any} */ ({ sleepers: new Set() })
  const config = { endpoint: 'http://x', requestTimeout: 1000, batchSize: 1, retryMin: 10, retryMax: 10 }
  assert.equal(new Applier(ctx, { ...config, reporter: 'koishi-a.b:c' }, link).streamPath(), '/v1/assignments/stream?reporter=koishi-a.b%3Ac')
  assert.equal(new Applier(ctx, config, link).streamPath(), '/v1/assignments/stream')
})

test("assign: what plugin-admin's assign will write, read from its argv as plugin-admin reads it", () => {
  const { intentOf, isAdminAssign } = require('../src/assign')
  const session = /** @type {any} */ ({ platform: 'onebot', channelId: '100', selfId: '1001', userId: '42', username: 'Alice', isDirect: false })
  const note = 'Koishi assign by onebot:42 (Alice)'
  assert.deepEqual(intentOf(session, {}, []), { platform: 'onebot', channel: '100', bot: '1001', note })
  assert.deepEqual(intentOf(session, {}, ['onebot:1002']), { platform: 'onebot', channel: '100', bot: '1002', note })
  assert.deepEqual(intentOf(session, { remove: true }, []), { platform: 'onebot', channel: '100', bot: null, note })
  assert.deepEqual(intentOf(session, { channel: 'onebot:200' }, []), { platform: 'onebot', channel: '200', bot: '1001', note })
  assert.equal(intentOf(session, {}, ['telegram:5']), null, 'plugin-admin refuses another platform itself')
  assert.equal(intentOf({ ...session, isDirect: true }, {}, []), null, 'a private chat without -c: plugin-admin answers')
  assert.ok(isAdminAssign({ name: 'assign', config: { admin: { channel: true } } }))
  assert.ok(!isAdminAssign({ name: 'assign', config: {} }), "another plugin's assign")
  assert.ok(!isAdminAssign({ name: 'channel.locale', config: { admin: { channel: true } } }))
})
