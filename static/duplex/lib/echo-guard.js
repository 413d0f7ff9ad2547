// The echo guard of a page that plays the reply itself (the WebSocket transport): the browser's
// echo cancellation does not cover Web Audio playback, and even where it helps, the assistant's
// own voice from the speakers can reach the mic loud enough for the server's VAD to call it a
// barge-in, and the assistant would interrupt itself. So while the assistant is audibly playing,
// a mic frame passes only if it is clearly louder than what is played (ECHO_RATIO times the
// playback level, and at least ECHO_FLOOR); the sender puts silence in place of the others (not
// dropped, so the server's audio timeline stays continuous). A user who really talks over the
// assistant is louder at the mic than the echo and still gets through.

const ECHO_RATIO = 0.6;
const ECHO_FLOOR = 0.015;
const ECHO_HANGOVER_MS = 250; // room reverb outlives the last played sample a little
const PLAYING_LEVEL = 0.002; // the player's RMS above which the reply counts as sounding

export class EchoGuard {
  constructor() {
    this._lastLoud = 0; // when the player last played something audible
    this._level = 0; // its level then
  }

  /** The player's progress report ({level}: the RMS it played since the last one). */
  played({ level }) {
    if (level > PLAYING_LEVEL) {
      this._lastLoud = performance.now();
      this._level = level;
    }
  }

  /** Whether a mic frame this loud (RMS) is the user rather than the reply's echo. */
  passes(rms) {
    if (performance.now() - this._lastLoud >= ECHO_HANGOVER_MS) return true;
    return rms >= Math.max(ECHO_FLOOR, this._level * ECHO_RATIO);
  }
}
