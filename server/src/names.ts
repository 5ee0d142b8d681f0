/** File names: the one validation lives in shared/src/names.ts (the clients check every listed
 *  name with it too); server code imports it from here. */
export { MAX_COMPONENT_BYTES, MAX_NAME_BYTES, validateName, checkedName } from '../../shared/src/names.ts';
