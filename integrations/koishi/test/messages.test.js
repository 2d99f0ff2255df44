// @ts-check
'use strict'
// Message counts for the service's `balanceBy: messages`: a real Koishi 4.18 with two
// OneBot-like mock bots, the plugin, and the real service binary. The service turns the counts
// into weights (ln 2 a message on the default `weights.halfLife` of a day, at least
// `weights.floor` 1), which `GET /v1/weights/onebot` shows; every test compares them with the
// messages it delivered, within 1 %, so a message counted twice (or lost) fails.
// Runs in order.
//
//   bot 1001: groups 1-7        bot 1002: groups 1, 3-7 (not 2)

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const plugin = require('../src')
const { createKoishi, captureLogs, waitFor, sleep } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const G = (/** @type {number} */ i) => String(300000 + i)
const GROUPS = [1, 2, 3, 4, 5, 6, 7].map(G)
const REPORTER = 'koishi-messages'
const LN2 = Math.LN2
/** messageReportInterval of these tests, in seconds */
const INTERVAL = 1

/** @type {string} */ let dir
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs

const pluginLines = (/** @type {RegExp} */ re) => logs.records.filter(r => r.name === 'auto-assign' && re.test(r.content))

const pluginConfig = {
  endpoint: '',
  token: TOKEN,
  reporter: REPORTER,
  // heartbeats well apart from the message reports: the requests that carry counts are ours to time
  heartbeatInterval: 4000,
  retryMin: 100,
  retryMax: 500,
  requestTimeout: 2000,
  messageReportInterval: INTERVAL,
}

/** The service's weights of platform onebot. @returns {Promise<Record<string, number>>} */
async function weights() {
  const { status, body } = await service.api('GET', '/v1/weights/onebot')
  assert.equal(status, 200)
  return body.weights
}

/** Within 1 % of `want`. @param {number | undefined} got @param {number} want */
const near = (got, want) => got !== undefined && Math.abs(got - want) <= 0.01 * want

/** What `messages` counted messages weigh on the default settings. @param {number} n */
const expected = (n) => Math.max(1, n * LN2)

/**
 * Waits until the service's weights are `want` (group → messages), then one more report
 * period and a half, and checks that they stayed (no count sent twice late).
 * @param {Record<string, number>} want @param {number} [timeout]
 */
async function weightsBecome(want, timeout = 5000) {
  const ok = (/** @type {Record<string, number>} */ w) => Object.entries(want).every(([g, n]) => near(w[g], expected(n)))
  let last = {}
  try {
    await waitFor(async () => ok(last = await weights()), timeout, 'weights')
  } catch (e) {
    assert.fail(`weights ${JSON.stringify(last)}, want ${JSON.stringify(Object.fromEntries(Object.entries(want).map(([g, n]) => [g, expected(n)])))}`)
  }
  await sleep(INTERVAL * 1500)
  const w = await weights()
  for (const [g, n] of Object.entries(want)) {
    assert.ok(near(w[g], expected(n)), `group ${g}: weight ${w[g]}, want ${n} messages = ${expected(n).toFixed(4)} (±1 %)`)
  }
  return w
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-'))
  service = new Service({ dir, port: await freePort() })
  await service.start()
  pluginConfig.endpoint = service.endpoint
  logs = captureLogs()
  koishi = await createKoishi({
    dir,
    bots: [
      { selfId: '1001', guilds: GROUPS },
      { selfId: '1002', guilds: GROUPS.filter(g => g !== G(2)) },
    ],
    plugin,
    pluginConfig,
  })
  // the service knows every group (counts of unknown channels are ignored)
  await waitFor(async () => Object.keys(await service.assignments()).length === GROUPS.length, 5000, 'groups assigned')
})

after(async () => {
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('1. each message once, however many bots got it; bots\' own messages and direct messages not counted', async () => {
  const w0 = await weights()
  for (const g of GROUPS) assert.equal(w0[g], 1, `group ${g} starts at the floor`)

  // group 1, both bots: 10 messages.
  // * 4 identical messages of one user in one second, OneBot-style: the same `time` for every
  //   copy, a different message id per bot. Each is a message of its own: 4, not 1 (and not 8).
  const t = Math.floor(Date.now() / 1000) * 1000
  for (let i = 0; i < 4; i++) await koishi.deliver(G(1), 'u1', '+1', { timestamp: t })
  // * 3 messages of different users, time stamped by each session (a few ms apart per bot)
  for (const u of ['u2', 'u3', 'u4']) await koishi.deliver(G(1), u, 'hello from ' + u)
  // * 2 images, whose URL differs per receiving account (NapCat signs it per account)
  for (let i = 0; i < 2; i++) {
    await koishi.deliver(G(1), 'u5', (bot) => `look <img src="https://multimedia.nt.qq.com/download?fileid=${i}&amp;rkey=${bot}-${i}"/>`, { timestamp: t + 1000 })
  }
  // * 1 message that reaches the two bots 3 s apart (a slow connection)
  const late = Date.now()
  await koishi.deliver(G(1), 'u6', 'late', { bots: ['1001'], timestamp: late })
  await koishi.deliver(G(1), 'u6', 'late', { bots: ['1002'], timestamp: late + 3000 })

  // group 2, bot 1001 only: 3 messages
  for (let i = 0; i < 3; i++) await koishi.deliver(G(2), 'u7', 'message ' + i)

  // group 4: 2 messages of users, and the bots' own, which are not counted: 1002 speaking
  // (1001 receives it), and 1001's own message echoed to itself (OneBot's message_sent)
  await koishi.deliver(G(4), 'u8', 'one')
  await koishi.deliver(G(4), 'u8', 'two')
  await koishi.deliver(G(4), '1002', 'pong:1002', { bots: ['1001'] })
  await koishi.deliver(G(4), '1001', 'pong:1001', { bots: ['1001', '1002'] })
  // a direct message is not a group's
  await koishi.bot('1001').client('u9', /** @type {any} */ (undefined)).receive('hi')

  // group 3: silent
  const w = await weightsBecome({ [G(1)]: 10, [G(2)]: 3, [G(3)]: 0, [G(4)]: 2 })
  console.log(`# weights: ${JSON.stringify(Object.fromEntries(GROUPS.map(g => [g, w[g]])))}`)
  assert.equal(w[G(3)], 1, 'a silent group weighs the floor')
  assert.ok(pluginLines(/reported \d+ message\(s\)/).length > 0)
})

test('2. counts refused with 409 (the service forgot the reporter) are sent again after the full state, once', async () => {
  const w1 = await weights()
  // one message, reported: the next heartbeat is 4 s away, the next report 1 s
  const reports = pluginLines(/reported 1 message\(s\) in 1 channel/).length
  await koishi.deliver(G(5), 'u10', 'before the delete')
  await waitFor(() => pluginLines(/reported 1 message\(s\) in 1 channel/).length > reports, 3000, 'reported')
  const notDelivered = pluginLines(/not delivered \(.*HTTP 409/).length
  const conflicts = pluginLines(/does not know reporter/).length
  assert.equal((await service.api('DELETE', `/v1/fleet/reporters/${REPORTER}`)).status, 200)
  // the counts are the next request: they get the 409
  for (let i = 0; i < 4; i++) await koishi.deliver(G(5), 'u10', 'after the delete ' + i)
  await waitFor(() => pluginLines(/does not know reporter/).length > conflicts, 4000, '409 seen')
  assert.ok(pluginLines(/not delivered \(.*HTTP 409/).length > notDelivered, 'the counts got the 409')
  const w = await weightsBecome({ [G(5)]: 5 })
  // what the service did with the other groups' weights while the reporter was gone
  console.log(`# after the reporter was forgotten and re-reported: group 1 ${w[G(1)]} (was ${w1[G(1)]}), group 5 ${w[G(5)]}`)
})

test('3. counts made while the service is down are sent when it is back, once', async () => {
  await service.stop('SIGKILL')
  for (let i = 0; i < 6; i++) await koishi.deliver(G(6), 'u11', 'during the outage ' + i)
  // several failed attempts (retryMax 0.5 s, reports every second)
  await sleep(2500)
  for (let i = 0; i < 2; i++) await koishi.deliver(G(6), 'u11', 'still down ' + i)
  await service.start()
  await waitFor(() => pluginLines(/available again/).length > 0, 5000, 'the plugin reconnected')
  const w = await weightsBecome({ [G(6)]: 8 })
  console.log(`# after the outage: group 6 ${w[G(6)]} (8 messages while the service was down)`)
})

test('4. disposing the plugin sends the counts still pending', async () => {
  // one message, reported; two more, and the plugin stops at once, before its next report
  const reports = pluginLines(/reported 1 message\(s\) in 1 channel/).length
  await koishi.deliver(G(7), 'u12', 'reported')
  await waitFor(() => pluginLines(/reported 1 message\(s\) in 1 channel/).length > reports, 3000, 'reported')
  await koishi.deliver(G(7), 'u12', 'just before the stop')
  await koishi.deliver(G(7), 'u12', 'just before the stop, again')
  const stops = service.count(/fleet reporter koishi-messages: stopped/) // test 2's DELETE
  koishi.pluginFork.dispose()
  await waitFor(() => service.count(/fleet reporter koishi-messages: stopped/) > stops, 3000, 'DELETE seen by the service')
  assert.ok(pluginLines(/reported 2 message\(s\) in 1 channel\(s\) before stopping/).length, 'sent on dispose')
  await weightsBecome({ [G(7)]: 3 })
})

test('5. messageReportInterval 0: nothing counted', async () => {
  const onlines = service.count(/bot onebot:\d+ online in/)
  const fork = koishi.app.plugin(plugin, { ...pluginConfig, messageReportInterval: 0 })
  try {
    await waitFor(() => service.count(/bot onebot:\d+ online in/) > onlines, 5000, 'reported again')
    const before = (await weights())[G(3)]
    for (let i = 0; i < 5; i++) await koishi.deliver(G(3), 'u13', 'not counted ' + i)
    await sleep(INTERVAL * 2000)
    assert.equal((await weights())[G(3)], before)
    assert.equal(before, 1)
  } finally {
    fork.dispose()
  }
})
