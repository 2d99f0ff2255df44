// @ts-check
'use strict'
// A throwaway redis-server on a free loopback port, nothing saved to disk (scripts/test.sh
// installs redis-server, as for the Rust tests).

const { spawn, execFileSync } = require('node:child_process')
const { createConnection } = require('node:net')
const { freePort } = require('./service')

class Redis {
  /** Whether redis-server is installed. */
  static available() {
    try {
      execFileSync('redis-server', ['--version'], { stdio: 'ignore' })
      return true
    } catch {
      return false
    }
  }

  static async start() {
    const port = await freePort()
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    const redis = new Redis(port, child)
    // ready once it accepts a connection
    const deadline = Date.now() + 10000
    for (;;) {
      if (child.exitCode !== null) throw new Error('redis-server exited at start')
      if (await accepts(port)) break
      if (Date.now() > deadline) throw new Error('redis-server did not accept connections within 10 s')
      await new Promise(r => setTimeout(r, 20))
    }
    return redis
  }

  /** @param {number} port @param {import('node:child_process').ChildProcess} child */
  constructor(port, child) {
    this.port = port
    this.child = child
    this.url = `redis://127.0.0.1:${port}`
  }

  async stop() {
    const child = this.child
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise(res => child.once('exit', res))
    child.kill('SIGKILL')
    await exited
  }
}

/** @param {number} port @returns {Promise<boolean>} */
function accepts(port) {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}

module.exports = { Redis }
