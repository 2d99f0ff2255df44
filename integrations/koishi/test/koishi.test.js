// @ts-check
'use strict'
// A real Koishi 4.18 (SQLite, autoAssign: false) with three OneBot-like mock bots in 12 groups,
// the plugin, and the real auto-assign service binary. Runs in order; each test starts from
// where the previous one left the fleet.
//
//   bot 1001: groups 1-12 (its guild list comes in pages of 5, groups 1 and 2 on the last page)
//   bot 1002: groups 1-8
//   bot 1003: groups 5-12

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const plugin = require('../src')
const { createKoishi, captureLogs, waitFor, sleep } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const G = (/** @type {number} */ i) => String(100000 + i)
const range = (/** @type {number} */ a, /** @type {number} */ b) => Array.from({ length: b - a + 1 }, (_, i) => G(a + i))
const GROUPS = range(1, 12)
const REPORTER = 'koishi-test'

/** @type {string} */ let dir
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs

const pluginLines = (/** @type {RegExp} */ re) => logs.records.filter(r => r.name === 'auto-assign' && re.test(r.content))

/**
 * The service's assignment and who answers in each group, when they agree for every group in
 * `groups` (an assigned group answered by exactly its assignee, an unassigned one by nobody).
 * @param {string[]} groups
 */
async function agreement(groups) {
  const assignment = await service.assignments()
  const answers = await koishi.answers(groups)
  for (const g of groups) {
    const want = assignment[g] ? [assignment[g]] : []
    if (JSON.stringify(answers[g]) !== JSON.stringify(want)) return null
  }
  return { assignment, answers }
}

/** `agreement`, with every group of `groups` assigned. @param {string[]} groups */
async function assignedAndAgreed(groups) {
  const r = await agreement(groups)
  return r && groups.every(g => r.assignment[g]) ? r : null
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-'))
  service = new Service({ dir, port: await freePort() })
  await service.start()
  logs = captureLogs()
  koishi = await createKoishi({
    dir,
    bots: [
      { selfId: '1001', guilds: GROUPS.slice().reverse(), guildPageSize: 5 },
      { selfId: '1002', guilds: range(1, 8) },
      { selfId: '1003', guilds: range(5, 12) },
    ],
    plugin,
    pluginConfig: {
      endpoint: service.endpoint,
      token: TOKEN,
      reporter: REPORTER,
      heartbeatInterval: 1000,
      batchSize: 5,
      retryMin: 100,
      retryMax: 1000,
      requestTimeout: 2000,
    },
  })
})

after(async () => {
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('1. every group is answered by exactly its assignee', async () => {
  const started = Date.now()
  const { assignment, answers } = await waitFor(() => assignedAndAgreed(GROUPS), 10000, 'Koishi answers as assigned')
  console.log(`# start → every group answered by its assignee: ${Date.now() - started} ms`)
  for (const g of GROUPS) {
    assert.ok(assignment[g], `group ${g} is assigned`)
    assert.deepEqual(answers[g], [assignment[g]], `group ${g}`)
    assert.ok(koishi.bot(assignment[g]).guilds.has(g), `the assignee of ${g} is in it`)
  }
  const loads = Object.values(assignment).reduce((m, b) => ({ ...m, [b]: (m[b] ?? 0) + 1 }), /** @type {Record<string, number>} */ ({}))
  console.log('# loads:', JSON.stringify(loads))
  assert.equal(Object.keys(loads).length, 3, 'all three bots have groups')
  assert.ok(koishi.bot('1001').guildListCalls >= 3, 'the paged guild list was read to the end')
  // the rows are exactly the service's assignment
  const rows = await koishi.rows()
  assert.deepEqual(Object.fromEntries(rows.map(r => [r.id, r.assignee])), assignment)
})

test('1b. channels of platforms this Koishi has no bot on are not written', async () => {
  const put = await service.api('PUT', '/v1/fleet/reporters/elsewhere', {
    bots: [{ platform: 'telegram', id: 't1', online: true, channels: ['-100', '-200'] }],
  })
  assert.equal(put.status, 200)
  await waitFor(async () => Object.keys(await service.assignments('telegram')).length === 2, 3000, 'telegram assigned')
  await sleep(300)
  assert.equal((await koishi.rows('telegram')).length, 0)
  assert.equal((await service.api('DELETE', '/v1/fleet/reporters/elsewhere')).status, 200)
  await waitFor(async () => Object.keys(await service.assignments('telegram')).length === 0, 3000, 'telegram unassigned')
})

test('2. a bot logging out: its groups are answered by their new assignees within 2 s', async () => {
  const before = await service.assignments()
  const count = (/** @type {string} */ bot) => GROUPS.filter(g => before[g] === bot).length
  const leaving = count('1002') >= count('1003') ? '1002' : '1003'
  const moved = GROUPS.filter(g => before[g] === leaving)
  assert.ok(moved.length > 0)
  const t0 = performance.now()
  koishi.removeBot(leaving)
  const done = await waitFor(async () => {
    const r = await agreement(moved)
    return r && moved.every(g => r.assignment[g] && r.assignment[g] !== leaving) ? r : null
  }, 5000, 'new assignees answer')
  const ms = performance.now() - t0
  console.log(`# logout of ${leaving} → new assignee answering in all ${moved.length} of its groups: ${ms.toFixed(0)} ms`)
  for (const g of moved) assert.deepEqual(done.answers[g], [done.assignment[g]])
  assert.ok(ms < 0 + 2000, `within botOffline (0 s) + 2 s, took ${ms.toFixed(0)} ms`)
  await waitFor(() => assignedAndAgreed(GROUPS), 3000, 'all groups agree')
})

test('2b. a bot going offline and online again (login-updated)', async () => {
  const bot = koishi.bot('1003')
  const before = await service.assignments()
  const mine = GROUPS.filter(g => before[g] === '1003')
  assert.ok(mine.length > 0)
  const t0 = performance.now()
  bot.offline()
  await waitFor(async () => {
    const r = await agreement(GROUPS)
    return r && mine.every(g => r.assignment[g] === '1001')
  }, 3000, "1003's groups moved to 1001")
  console.log(`# 1003 offline → 1001 answering in its ${mine.length} groups: ${(performance.now() - t0).toFixed(0)} ms`)
  bot.online()
  const r = await waitFor(async () => {
    const r = await agreement(GROUPS)
    return r && Object.values(r.assignment).includes('1003') ? r : null
  }, 3000, '1003 gets groups again')
  assert.ok(Object.values(r.assignment).includes('1001'))
})

test('3. a bot leaving one group, and joining a new one', async () => {
  const before = await service.assignments()
  // a group of 1003's where 1001 can take over
  const group = range(5, 12).find(g => before[g] === '1003') ?? G(9)
  const owner = before[group]
  const other = owner === '1003' ? '1001' : '1003'
  koishi.bot(owner).leaveGuild(group)
  const r = await waitFor(async () => {
    const r = await agreement(GROUPS)
    return r && r.assignment[group] === other ? r : null
  }, 3000, `${other} takes group ${group}`)
  assert.deepEqual(r.answers[group], [other])

  const fresh = G(13)
  koishi.bot('1003').joinGuild(fresh)
  const j = await waitFor(async () => {
    const r = await agreement([...GROUPS, fresh])
    return r && r.assignment[fresh] === '1003' ? r : null
  }, 3000, '1003 answers in the group it joined')
  assert.deepEqual(j.answers[fresh], ['1003'])
})

test('4a. the service forgets the reporter: 409 → the plugin reports its full state again', async () => {
  const conflicts = pluginLines(/does not know reporter/).length
  const del = await service.api('DELETE', `/v1/fleet/reporters/${REPORTER}`)
  assert.equal(del.status, 200)
  const t0 = performance.now()
  // its bots are offline for the service now; the next heartbeat (1 s) gets 409 and re-reports
  await waitFor(() => pluginLines(/does not know reporter/).length > conflicts, 3000, '409 seen')
  await waitFor(async () => {
    const a = await service.assignments()
    return Object.keys(a).length === 13 && (await agreement([...GROUPS, G(13)]))
  }, 3000, 'reassigned and applied')
  console.log(`# reporter forgotten → all groups answered again: ${(performance.now() - t0).toFixed(0)} ms`)
})

test('4b. the service restarted: the plugin reconnects, re-reports and resyncs', async () => {
  const groups = [...GROUPS, G(13)]
  // (the service logs "fleet reporter …: connected" only when the reporter is new to it, and the
  // plugin's stream, which names the reporter, may come back before its full state does)
  const onlines = service.count(/bot onebot:100[123] online in/)
  await service.stop('SIGTERM')
  const t0 = performance.now()
  await service.start()
  const r = await waitFor(async () => {
    const a = await service.assignments()
    return Object.keys(a).length === groups.length && (await agreement(groups))
  }, 8000, 'resynced after the restart')
  console.log(`# service restarted → every group answered by its assignee: ${(performance.now() - t0).toFixed(0)} ms`)
  assert.ok(service.count(/bot onebot:100[123] online in/) > onlines, 'the reporter reported its bots again')
  for (const g of groups) assert.deepEqual(r.answers[g], [r.assignment[g]])
})

test('4c. restarted with sources.http.startupWait 2 s: no group goes silent meanwhile', async () => {
  // With startupWait 0 (above) a restarted service plans once before the plugin re-reports, with
  // no bots: every group is unassigned for a few ms. startupWait keeps the stored assignment
  // until the reporters are back.
  const groups = [...GROUPS, G(13)]
  await waitFor(() => assignedAndAgreed(groups), 3000, 'in agreement')
  service.configure({ startupWait: 2 })
  /** @type {Map<string, number>} */
  const wrong = new Map()
  let rounds = 0
  let polling = true
  const poller = (async () => {
    while (polling) {
      const answers = await koishi.answers(groups)
      rounds++
      for (const g of groups) if (answers[g].length !== 1) wrong.set(g, (wrong.get(g) ?? 0) + 1)
      // Koishi on sql.js answers in microtasks only: without a timer this loop starves the
      // event loop (no child exit, no HTTP)
      await sleep(5)
    }
  })()
  try {
    await service.stop('SIGTERM')
    await service.start()
    // past startupWait: the restarted service's first plan ran (its status had none before)
    await waitFor(async () => (await service.api('GET', '/v1/status')).body?.last_run, 6000, 'the first plan after startupWait')
    await waitFor(() => assignedAndAgreed(groups), 3000, 'in agreement after the restart')
  } finally {
    polling = false
    await poller
    service.configure({ startupWait: 0 })
  }
  console.log(`# restart with startupWait: ${rounds} rounds of ${groups.length} messages, groups not answered by exactly one bot: ${JSON.stringify(Object.fromEntries(wrong))}`)
  assert.equal(wrong.size, 0)
})

test('5. the service down: Koishi keeps the last assignment, one log line per outage', async () => {
  const groups = [...GROUPS, G(13)]
  const last = await waitFor(() => assignedAndAgreed(groups), 3000, 'in agreement')
  const downLines = pluginLines(/service at .* unavailable/).length
  const upLines = pluginLines(/available again/).length
  await service.stop('SIGKILL')
  // several retries of both the stream and the reporter (retryMax 1 s, heartbeat 1 s)
  await sleep(3000)
  const answers = await koishi.answers(groups)
  for (const g of groups) assert.deepEqual(answers[g], [last.assignment[g]], `group ${g} keeps its assignee`)
  assert.equal(pluginLines(/service at .* unavailable/).length, downLines + 1, 'exactly one line for the outage')
  // a fleet change during the outage reaches the service once it is back
  const group = G(12)
  const owner = last.assignment[group]
  const other = owner === '1003' ? '1001' : '1003'
  koishi.bot(owner).leaveGuild(group)
  await sleep(500)
  const t0 = performance.now()
  await service.start()
  const r = await waitFor(async () => {
    const r = await agreement(groups)
    return r && r.assignment[group] === other ? r : null
  }, 8000, 'back in agreement after the outage')
  console.log(`# service back → in agreement (with a leave made during the outage): ${(performance.now() - t0).toFixed(0)} ms`)
  assert.deepEqual(r.answers[group], [other])
  assert.equal(pluginLines(/service at .* unavailable/).length, downLines + 1, 'still one line for the outage')
  assert.equal(pluginLines(/available again/).length, upLines + 1, 'one line when it is back')
})

test('6. disposing the plugin takes its bots offline at once (DELETE)', async () => {
  koishi.pluginFork.dispose()
  await waitFor(() => service.count(/fleet reporter koishi-test: stopped/) > 0, 3000, 'DELETE seen by the service')
  await waitFor(async () => Object.keys(await service.assignments()).length === 0, 3000, 'no bot left')
})
