import pkg from '../../package.json' with { type: 'json' };

/** The sluice version, from package.json, reported in runner status and gateway logs. */
export const VERSION: string = pkg.version;
